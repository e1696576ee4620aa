/*
 * Helper threads with a file table of their own.
 *
 * Why: while a second thread shares the process's file table, the kernel takes a
 * reference on the file in every fd system call (fdget is "light" only for a table with
 * one user). Soft RDMA devices (rxe, siw) ring their doorbell with a write() on the
 * device's fd, once per operation, so an application thread that posts operations pays
 * that reference for as long as our helper threads (rdma_cm events, receives,
 * heartbeats) share its table: about 0.4 us a system call, 1-2% of an emulated 1 B round
 * trip (docs/transport.md). A helper that unshares its table (CLONE_FILES) leaves the
 * application thread, if it is the only other one, with a table of its own again.
 *
 * The contract that makes this safe:
 *  - the helper keeps only the fds it is given (plus 0-2, for logging) and closes its
 *    copies of all others, so it never holds an application's file open (a pipe the
 *    application closes still reaches EOF);
 *  - a helper never creates an fd that another thread uses, nor uses an fd created after
 *    it started: the provider lists every fd its helper-thread calls touch, and opens
 *    them all before starting helpers.
 */
#ifndef DDSS_NET_THREAD_FILES_H
#define DDSS_NET_THREAD_FILES_H

#include <stddef.h>

struct ddss_tp;

/**
 * Give the calling thread a copy of the file table that holds only @keep[0..n) and the
 * standard streams (0-2). Returns 0, or -errno with the table left shared. Call first
 * thing in a new thread, before it opens anything.
 */
int ddss_thread_files_private(const int *keep, size_t n);

/**
 * Called first thing by the network layer's helper threads: make the table private when
 * @tp can say which fds its calls use (ops->thread_fds) and DDSS_THREAD_FILES is not
 * "shared"; otherwise, and on any failure, stay shared (correct, only slower).
 */
void ddss_tp_thread_files(struct ddss_tp *tp);

#endif /* DDSS_NET_THREAD_FILES_H */
