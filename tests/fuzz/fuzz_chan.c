/*
 * The daemon's side of a client channel (src/daemon/chan.c): ddss_chan_attach on a memfd
 * whose header page the client wrote, then the ring counters (ddss_chan_wait_req with
 * timeout 0, ddss_chan_req_done, ddss_chan_resp_slot) and data ranges
 * (ddss_chan_data_peer), with the client changing the shared words between calls.
 *
 * Input: [size class 1][flags 1][header page bytes, laid out as struct ddss_chan_hdr]...
 * then ops, each [op 1][arg 8][arg 8]: op 0 waits for a request (and maybe frees it), 1 asks
 * for a response slot (and posts it), 2 asks for a data range, 3 overwrites a header word as
 * a hostile client would, 4 grows the memfd.
 *
 * Invariants: attach accepts only a sealed memfd with the magic, version and a recorded
 * data length in [DDSS_CHAN_DATA_MIN, DDSS_CHAN_DATA_MAX] backed by the file; results are
 * the documented codes; a message or slot pointer lies in its ring; a data range handed out
 * lies inside the file (every byte of it is touched: outside the file it would fault).
 */
#include "fuzz_common.h"
#include "daemon/chan.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define MAX_FILE (DDSS_CHAN_DATA_OFF + ((uint64_t)1 << 20))

static void touch(const volatile uint8_t *p, uint64_t len)
{
	/* Every page, first and last byte: a range beyond the file would SIGBUS here. */
	uint8_t sum = 0;

	if (!len)
		return;
	for (uint64_t o = 0; o < len; o += 4096)
		sum += p[o];
	sum += p[len - 1];
	(void)sum;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const uint64_t sizes[] = { 0, 4096, DDSS_CHAN_DATA_OFF,
					  DDSS_CHAN_DATA_OFF + DDSS_CHAN_DATA_MIN - 1,
					  DDSS_CHAN_DATA_OFF + DDSS_CHAN_DATA_MIN,
					  DDSS_CHAN_DATA_OFF + 2 * DDSS_CHAN_DATA_MIN,
					  DDSS_CHAN_DATA_OFF + 3 * DDSS_CHAN_DATA_MIN + 17, MAX_FILE };
	struct fuzz_in in = { data, size };
	uint8_t cls = fuzz_u8(&in), flags = fuzz_u8(&in);
	struct ddss_chan_hdr hdr;
	struct ddss_chan *c = NULL;
	struct stat st;
	uint64_t file_len = sizes[cls % 8];
	int fd, r;

	fuzz_bytes(&in, &hdr, sizeof(hdr));
	/* Mostly a well-formed header, so the fuzzer gets past attach and at the counters. */
	if (!(flags & 1)) {
		hdr.magic = DDSS_CHAN_MAGIC;
		hdr.version = DDSS_CHAN_VERSION;
	}
	if (!(flags & 2))
		hdr.data_len = DDSS_CHAN_DATA_MIN << (hdr.data_len % 5);
	fd = memfd_create("fuzz-chan", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	FUZZ_CHECK(fd >= 0);
	FUZZ_CHECK(ftruncate(fd, (off_t)file_len) == 0);
	if (file_len >= sizeof(hdr))
		FUZZ_CHECK(pwrite(fd, &hdr, sizeof(hdr), 0) == (ssize_t)sizeof(hdr));
	if (!(flags & 4))
		FUZZ_CHECK(fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK) == 0);

	r = ddss_chan_attach(fd, &c);
	FUZZ_CHECK(r == 0 || r == -EPROTO || r == -ENOMEM);
	if (r == 0) {
		FUZZ_CHECK(!(flags & 4));
		FUZZ_CHECK(hdr.magic == DDSS_CHAN_MAGIC && hdr.version == DDSS_CHAN_VERSION);
		FUZZ_CHECK(hdr.data_len >= DDSS_CHAN_DATA_MIN && hdr.data_len <= DDSS_CHAN_DATA_MAX);
		FUZZ_CHECK(hdr.data_len <= file_len - DDSS_CHAN_DATA_OFF);
	}
	close(fd); /* the channel keeps its own duplicate */
	if (r)
		return 0;
	fd = ddss_chan_fd(c);

	for (int n = 0; n < 64 && in.left; n++) {
		uint8_t op = fuzz_u8(&in);
		uint64_t a = fuzz_u64(&in), b = fuzz_u64(&in);
		const void *msg;
		void *slot, *p;
		uint8_t *base;

		switch (op % 5) {
		case 0:
			r = ddss_chan_wait_req(c, 0, NULL, NULL, &msg);
			FUZZ_CHECK(r == 0 || r == -ETIMEDOUT || r == -EPIPE || r == -EPROTO);
			if (r == 0) {
				base = mmap(NULL, DDSS_CHAN_DATA_OFF, PROT_READ, MAP_SHARED, fd, 0);
				FUZZ_CHECK(base != MAP_FAILED);
				munmap(base, DDSS_CHAN_DATA_OFF);
				touch(msg, DDSS_CHAN_MSG);
				if (a & 1)
					ddss_chan_req_done(c);
			}
			break;
		case 1:
			r = ddss_chan_resp_slot(c, &slot);
			FUZZ_CHECK(r == 0 || r == -EAGAIN || r == -EPIPE || r == -EPROTO);
			if (r == 0) {
				memset(slot, 0x5a, DDSS_CHAN_MSG);
				if (a & 1)
					ddss_chan_resp_post(c);
			}
			break;
		case 2:
			/* Small ranges mostly, anywhere sometimes. */
			if (!(a >> 63)) {
				a %= 4 * DDSS_CHAN_DATA_MIN;
				b %= 2 * DDSS_CHAN_DATA_MIN;
			}
			r = ddss_chan_data_peer(c, a, b, &p);
			FUZZ_CHECK(r == 0 || r == -EINVAL || r == -EPROTO || r == -ENOMEM);
			if (r == 0) {
				FUZZ_CHECK(fstat(fd, &st) == 0);
				FUZZ_CHECK(a + b <= (uint64_t)st.st_size - DDSS_CHAN_DATA_OFF);
				touch(p, b);
			}
			break;
		case 3: {
			/* The client scribbles on one shared word (counters, closed, data_len). */
			static const size_t words[] = {
				offsetof(struct ddss_chan_hdr, closed),
				offsetof(struct ddss_chan_hdr, data_len),
				offsetof(struct ddss_chan_hdr, req) + offsetof(struct ddss_chan_ring, head),
				offsetof(struct ddss_chan_hdr, req) + offsetof(struct ddss_chan_ring, tail),
				offsetof(struct ddss_chan_hdr, resp) + offsetof(struct ddss_chan_ring, head),
				offsetof(struct ddss_chan_hdr, resp) + offsetof(struct ddss_chan_ring, tail),
			};
			size_t w = words[b % 6];
			uint32_t v32 = (uint32_t)a;

			if (w == offsetof(struct ddss_chan_hdr, data_len)) {
				uint64_t v = a >> 63 ? a : DDSS_CHAN_DATA_MIN << (a % 6);

				FUZZ_CHECK(pwrite(fd, &v, 8, (off_t)w) == 8);
			} else {
				/* Near the current value mostly: small lies as well as big ones. */
				if (!(b & 0x100)) {
					uint32_t cur;

					FUZZ_CHECK(pread(fd, &cur, 4, (off_t)w) == 4);
					v32 = cur + (uint32_t)(int8_t)a;
				}
				FUZZ_CHECK(pwrite(fd, &v32, 4, (off_t)w) == 4);
			}
			break;
		}
		case 4:
			/* The client grows the area (the memfd only grows: it is sealed). */
			FUZZ_CHECK(fstat(fd, &st) == 0);
			if ((uint64_t)st.st_size < MAX_FILE)
				FUZZ_CHECK(ftruncate(fd, (off_t)(st.st_size + (off_t)(a % MAX_FILE) / 2 + 1)) == 0 ||
					   errno == EPERM);
			break;
		}
	}
	ddss_chan_destroy(c);
	return 0;
}
