/*
 * Frames posted DDSS_TP_LATER (a lock's posted release): held for the poster's next frame
 * to the same peer, so that both leave in one write. On loopback a write of its own costs
 * the next request about half a round trip (docs/locks.md, "What the posted release costs
 * the next lock"). A poster need not send anything else, so such a frame also has a
 * deadline: the first one held arms a timer (one timerfd for the transport, TCP_LATER_NS),
 * and when it fires the progress thread sends whatever every channel still holds.
 *
 * The timer is armed only while disarmed: a thread that holds a frame every few
 * microseconds (a lock loop) makes one timerfd_settime and one wake-up of the progress
 * thread per TCP_LATER_NS, not per frame, and a frame never waits longer than the bound
 * because later ones moved the timer on. The progress thread clears the flag before it
 * sends, so a frame held meanwhile either goes in that send or arms the timer again.
 * Arming happens with no lock held (tcp_chan_post), since a timer that cannot be armed
 * sends at once, which takes the channels' send locks. The timer's wake-up is not a
 * request served: the progress thread does not poll for more after it (tcp_serve.c).
 */
#include "net/tcp/tcp.h"
#include "core/log.h"

#include <errno.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/timerfd.h>
#include <unistd.h>

long tcp_later_ns = TCP_LATER_NS;

/* Disarmed first: a frame held from now on arms the timer again, or goes out below. The
 * fences pair with tcp_later_arm's: a poster whose exchange found the flag still set
 * stored its frame's count before, and the pushes below load it after the clearing. */
static void send_held(struct tcp_tp *t)
{
	__atomic_store_n(&t->later_armed, 0, __ATOMIC_SEQ_CST);
	__atomic_thread_fence(__ATOMIC_SEQ_CST);
	for (uint32_t peer = 1; peer <= t->base.cfg.size; peer++)
		if (peer != t->base.cfg.rank)
			tcp_chan_push(&t->peers[peer].chan);
}

int tcp_later_start(struct tcp_tp *t)
{
	struct epoll_event ev = { .events = EPOLLIN, .data.ptr = &t->later_ev };

	t->later_ev = TCP_EV_LATER;
	t->later_armed = 0;
	t->later_stopped = false;
	t->later_fd = timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC | TFD_NONBLOCK);
	if (t->later_fd < 0)
		return -errno;
	if (epoll_ctl(t->epfd, EPOLL_CTL_ADD, t->later_fd, &ev)) {
		int r = -errno;

		close(t->later_fd);
		t->later_fd = -1;
		return r;
	}
	return 0;
}

void tcp_later_arm(struct tcp_tp *t)
{
	struct itimerspec its = { .it_value = { tcp_later_ns / 1000000000L,
						tcp_later_ns % 1000000000L } };

	__atomic_thread_fence(__ATOMIC_SEQ_CST); /* the frame's count before the flag: send_held */
	if (__atomic_exchange_n(&t->later_armed, 1, __ATOMIC_SEQ_CST))
		return;
	/* Stopped (no progress thread to send it), or a bound of 0 (which would disarm the
	 * timer): at once. */
	if (__atomic_load_n(&t->later_stopped, __ATOMIC_ACQUIRE) || tcp_later_ns <= 0) {
		send_held(t);
		return;
	}
	if (timerfd_settime(__atomic_load_n(&t->later_fd, __ATOMIC_RELAXED), 0, &its, NULL)) {
		/* Never leave a frame held for good: send it now, as without the flag. */
		DDSS_WARN("tcp: cannot arm the timer of held frames: %s", strerror(errno));
		send_held(t);
	}
}

void tcp_later_fire(struct tcp_tp *t)
{
	uint64_t expirations;

	if (read(t->later_fd, &expirations, sizeof(expirations)) < 0 && errno != EAGAIN)
		DDSS_WARN("tcp: reading the timer of held frames: %s", strerror(errno));
	send_held(t);
}

void tcp_later_stop(struct tcp_tp *t)
{
	if (t->later_fd < 0)
		return;
	/* The progress thread has ended: from now on a frame held is sent at once, and what
	 * is held now goes too. A poster between its check and its timerfd_settime finds the
	 * fd closed (or not a timer) and sends at once as well. */
	__atomic_store_n(&t->later_stopped, true, __ATOMIC_RELEASE);
	send_held(t);
	epoll_ctl(t->epfd, EPOLL_CTL_DEL, t->later_fd, NULL);
	close(t->later_fd);
	__atomic_store_n(&t->later_fd, -1, __ATOMIC_RELAXED);
}
