/*
 * How long a waiter polls before it sleeps (DDSS_COMPLETION=adaptive).
 *
 * Rule (docs/transport.md, "Completion modes"): spin for as long as a blocking wake-up
 * costs, measured once per process: the median round trip of a ping-pong between two
 * threads over a pair of pipes, each side blocked in read() until the other writes (two
 * wake-ups, each with its sleep, its wake and the syscalls around them). That is the price
 * an event-mode completion pays on top of a polled one (the sleep, the interrupt's wake-up,
 * then reading, acknowledging and re-arming the event), so spinning that long before
 * sleeping never costs more than twice the better of the two choices (the classic
 * spin-then-block bound), whichever way the completion time falls. Clamped to
 * [DDSS_SPIN_MIN_NS, DDSS_SPIN_MAX_NS]. DDSS_SPIN_US overrides it (0..10000 us; 0 never
 * spins, which makes adaptive behave as event).
 *
 * The providers' waits (verbs_cq.c, tcp_chan.c) read the bound once per wait and check the
 * clock only every few polls.
 */
#ifndef DDSS_NET_SPIN_H
#define DDSS_NET_SPIN_H

#include <stdint.h>

#define DDSS_SPIN_MIN_NS 5000
#define DDSS_SPIN_MAX_NS 100000
/* Largest DDSS_SPIN_US accepted. */
#define DDSS_SPIN_US_MAX 10000
/* Round trips measured (after a few not counted). */
#define DDSS_SPIN_ITERS 200

/**
 * Median round trip, in ns, of a blocking wake-up ping-pong between this thread and a
 * helper (@iters round trips). 0 or -errno (no pipe, no thread). Any thread; takes
 * @iters round trips of time (milliseconds).
 */
int ddss_spin_measure_wake(unsigned iters, int64_t *ns_p);

/** The spin bound for a measured wake-up round trip of @wake_ns: clamped to the cap. */
int64_t ddss_spin_bound_for(int64_t wake_ns);

/**
 * DDSS_SPIN_US, validated: *@us_p = its value, or -1 when unset or empty. -EINVAL (logged:
 * the variable, its value, the range) on anything but a whole number in 0..DDSS_SPIN_US_MAX.
 */
int ddss_spin_env(long *us_p);

/**
 * Fix this process's spin bound, once: DDSS_SPIN_US if set, else measured. Later calls
 * return the first one's result. 0, or -EINVAL when DDSS_SPIN_US is not valid (the bound
 * is then DDSS_SPIN_MAX_NS). Call where a wait of milliseconds is acceptable (open, init).
 */
int ddss_spin_init(void);

/** The spin bound in ns for the calling thread's waits (runs ddss_spin_init first if nobody
 * has): the process's, or the thread's floor (below) when that is higher, at most
 * DDSS_SPIN_MAX_NS. */
int64_t ddss_spin_ns(void);

/**
 * The calling thread's waits spin at least @ns (0: no floor) from now on, unless
 * DDSS_SPIN_US fixed the bound. For a thread whose waits have somebody spinning on their
 * result: a daemon's worker, whose client spins for its answer while the worker waits on
 * the fabric. Sleeping there frees no core (the client takes it), and the wake-up must
 * then displace the spinning client, which on the 2-vCPU VM cost a get through the daemon
 * about 5 us (docs/daemon.md, "The worker spins while its client does").
 */
void ddss_spin_thread_floor(int64_t ns);

/** The wake-up round trip ddss_spin_init measured, in ns; 0 when DDSS_SPIN_US set it. */
int64_t ddss_spin_wake_ns(void);

#endif /* DDSS_NET_SPIN_H */
