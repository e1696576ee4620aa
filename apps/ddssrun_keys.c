/*
 * ddssrun's keys files. The format is the library's (src/net/auth.h, DDSS_AUTH_KEYS_MAGIC):
 * "DDSSKEY1", the rank and the group size (both le32), then for each rank 1..N the 32-byte
 * key shared with it (for the rank itself, a key of its own). Pair keys are random, from getrandom(2):
 * one per pair, written into both ranks' files and nowhere else.
 */
#include "ddssrun_keys.h"

#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

enum { KEY_LEN = 32, HDR_LEN = 16 };

bool keys_path(char *out, size_t cap, const char *dir, int rank)
{
    int n = snprintf(out, cap, "%s/rank-%d.keys", dir, rank);
    return n > 0 && (size_t)n < cap;
}

static bool fill_random(unsigned char *buf, size_t len)
{
    while (len > 0) {
        ssize_t n = getrandom(buf, len, 0);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return false;
        buf += n;
        len -= (size_t)n;
    }
    return true;
}

/* The key of pair (a, b), a < b, in the triangle of all pairs. */
static unsigned char *pair_slot(unsigned char *tri, int n, int a, int b)
{
    size_t before = (size_t)(a - 1) * (size_t)(2 * n - a) / 2; /* pairs whose lower is < a */
    return tri + (before + (size_t)(b - a - 1)) * KEY_LEN;
}

static bool write_one(const char *dir, int rank, int n, unsigned char *tri, unsigned char *row)
{
    char path[4096];
    uint32_t v;
    size_t len = HDR_LEN + (size_t)n * KEY_LEN;
    int fd;
    bool ok;

    memcpy(row, "DDSSKEY1", 8);
    v = htole32((uint32_t)rank);
    memcpy(row + 8, &v, 4);
    v = htole32((uint32_t)n);
    memcpy(row + 12, &v, 4);
    for (int other = 1; other <= n; other++) {
        unsigned char *dst = row + HDR_LEN + (size_t)(other - 1) * KEY_LEN;
        if (other == rank) { /* its connection to itself (tcp reaches its own pool so) */
            if (!fill_random(dst, KEY_LEN))
                return false;
        } else
            memcpy(dst, pair_slot(tri, n, rank < other ? rank : other,
                                  rank < other ? other : rank), KEY_LEN);
    }
    if (!keys_path(path, sizeof path, dir, rank)) {
        fprintf(stderr, "ddssrun: keys directory path too long: %s\n", dir);
        return false;
    }
    fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0) {
        fprintf(stderr, "ddssrun: cannot create %s: %s\n", path, strerror(errno));
        return false;
    }
    ok = write(fd, row, len) == (ssize_t)len;
    ok = close(fd) == 0 && ok;
    if (!ok)
        fprintf(stderr, "ddssrun: cannot write %s: %s\n", path, strerror(errno));
    return ok;
}

bool keys_write(const char *dir, int nranks)
{
    size_t pairs = (size_t)nranks * (size_t)(nranks - 1) / 2;
    unsigned char *tri = malloc(pairs * KEY_LEN + 1);
    unsigned char *row = malloc(HDR_LEN + (size_t)nranks * KEY_LEN);
    bool ok = tri && row;
    int written = 0;

    if (!ok)
        fprintf(stderr, "ddssrun: no memory for %d ranks' keys\n", nranks);
    if (ok && !fill_random(tri, pairs * KEY_LEN)) {
        fprintf(stderr, "ddssrun: getrandom: %s\n", strerror(errno));
        ok = false;
    }
    for (int r = 1; ok && r <= nranks; r++)
        if ((ok = write_one(dir, r, nranks, tri, row)))
            written = r;
    if (tri)
        explicit_bzero(tri, pairs * KEY_LEN);
    if (row)
        explicit_bzero(row, HDR_LEN + (size_t)nranks * KEY_LEN);
    free(tri);
    free(row);
    for (int r = 1; !ok && r <= written; r++) {
        char path[4096];
        if (keys_path(path, sizeof path, dir, r))
            unlink(path);
    }
    return ok;
}

void keys_remove(const char *dir, int nranks)
{
    char path[4096];

    for (int r = 1; r <= nranks; r++)
        if (keys_path(path, sizeof path, dir, r))
            unlink(path);
    if (rmdir(dir) < 0 && errno != ENOENT)
        fprintf(stderr, "ddssrun: cannot remove %s: %s\n", dir, strerror(errno));
}
