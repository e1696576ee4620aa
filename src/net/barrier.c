/*
 * Group barrier over control messages: every rank sends ARRIVE(epoch) to rank 1; when
 * rank 1 has all of them it sends RELEASE(epoch) to everyone. O(N) messages, enough for
 * start-up and tests; nothing on a data path uses it.
 *
 * Who "all" is: every rank in static mode, where a rank that goes down fails the barrier.
 * In coordinator mode, the members this process counts (ddss_coord_in_view): not a free
 * slot, nor a member that left the view; the view settles a death, so the barrier waits
 * for it and goes on without the dead.
 *
 * A lost message does not hold the group (BARRIER_RESEND_MS): a waiting rank sends its
 * ARRIVE again now and then, and rank 1 answers an ARRIVE at an epoch it released already
 * with that RELEASE again. Both are idempotent (an epoch only moves forward). A replacement
 * repeats its QUERY the same way until it has the answer.
 */
#include "net/net_internal.h"
#include "net/coordinator.h"
#include "core/log.h"

#include <endian.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

/* QUERY / STATE: a process let in after the start asks rank 1 which barrier the group is
 * at, and counts on from there (enter_running). */
enum { BARRIER_ARRIVE = 1, BARRIER_RELEASE = 2, BARRIER_QUERY = 3, BARRIER_STATE = 4 };

/*
 * How often a waiting rank repeats its ARRIVE. A transport returns from a send once the
 * message is queued, so a message can still be lost with its connection, or (seen once in
 * CI on rxe, two devices: rank 1 released epoch 25 to ranks 3 and 4, and rank 2 never got
 * its RELEASE, nor any error) in the fabric; the whole group then waited out the timeout.
 * Rare enough that a second is plenty; frequent enough that a long barrier costs a
 * message a second per rank, nothing next to what the ranks do meanwhile.
 */
#define BARRIER_RESEND_MS 1000

struct barrier_msg {
	uint32_t kind;
	uint32_t epoch;
};

static int send_barrier(struct ddss_net *net, uint32_t to, uint32_t kind, uint32_t epoch)
{
	struct barrier_msg m = { htole32(kind), htole32(epoch) };

	return ddss_net_send(net, to, DDSS_MSG_BARRIER, &m, sizeof(m));
}

/*
 * mu held: send @kind to rank 1 again, outside mu (a send may connect, and the handshake
 * must not wait for us), and set when the next repeat is due. The send's result.
 */
static int repeat_locked(struct ddss_net *net, uint32_t kind, uint32_t epoch,
			 int64_t *resend_at)
{
	int err;

	pthread_mutex_unlock(&net->mu);
	err = send_barrier(net, 1, kind, epoch);
	pthread_mutex_lock(&net->mu);
	*resend_at = ddss_now_ns() + (int64_t)BARRIER_RESEND_MS * 1000000;
	return err;
}

/* mu held. */
static void release_locked(struct ddss_net *net, uint32_t epoch)
{
	if ((int32_t)(epoch - net->barrier_released) > 0)
		net->barrier_released = epoch;
	pthread_cond_broadcast(&net->cv);
}

/*
 * mu held: whether @epoch waits for @r (see the top). A member let in after the start (a
 * newcomer or a replacement) never took the start barrier: it counts from the next one.
 * Lock order: net, then coord.
 */
static bool counted(struct ddss_net *net, uint32_t r, uint32_t epoch)
{
	if (!net->env.coord)
		return true;
	if (epoch == 1 && (!net->env.incarnations || !net->env.incarnations[r]))
		return false; /* not in the view this process started from */
	return ddss_coord_in_view(net->env.coord, r);
}

/* Coordinator, mu held: true when this call completed @epoch (release it to the others). */
static bool complete_locked(struct ddss_net *net, uint32_t epoch)
{
	if ((int32_t)(net->barrier_released - epoch) >= 0)
		return false; /* released already */
	for (uint32_t r = 1; r <= net->env.size; r++)
		if ((int32_t)(net->barrier_arrived[r] - epoch) < 0 && counted(net, r, epoch))
			return false;
	release_locked(net, epoch);
	return true;
}

/* Coordinator, mu held: rank @r arrived at @epoch; true when that completed it. */
static bool arrive_locked(struct ddss_net *net, uint32_t r, uint32_t epoch)
{
	if ((int32_t)(epoch - net->barrier_arrived[r]) > 0)
		net->barrier_arrived[r] = epoch;
	return complete_locked(net, epoch);
}

/*
 * Coordinator, mu NOT held: sending may connect, and a connect reports the peer's state
 * through on_peer, which takes mu.
 */
static void release_others(struct ddss_net *net, uint32_t epoch)
{
	for (uint32_t r = 2; r <= net->env.size; r++) {
		int err;

		if (!counted(net, r, epoch))
			continue;
		err = send_barrier(net, r, BARRIER_RELEASE, epoch);
		if (err)
			DDSS_WARN("barrier %u: cannot release rank %u: %s", epoch, r, strerror(-err));
	}
}

void ddss_net_barrier_on_msg(void *arg, uint32_t from, const void *buf, size_t len)
{
	struct ddss_net *net = arg;
	struct barrier_msg m;
	uint32_t state = 0;
	bool last = false, answer = false, again = false, stale = false;

	if (len != sizeof(m)) {
		DDSS_WARN("malformed barrier message from rank %u", from);
		return;
	}
	memcpy(&m, buf, sizeof(m));
	m.kind = le32toh(m.kind);
	m.epoch = le32toh(m.epoch);
	pthread_mutex_lock(&net->mu);
	if (m.kind == BARRIER_ARRIVE && net->env.rank == 1 && from <= net->env.size && from != 1) {
		bool released = (int32_t)(net->barrier_released - m.epoch) >= 0;
		bool had_arrived = (int32_t)(net->barrier_arrived[from] - m.epoch) >= 0;

		/*
		 * Released, and counted with @from: a repeat, so its RELEASE was lost (or
		 * crossed the repeat on the way); answered unless @from is gone meanwhile.
		 * Released without it: @from counts from another epoch than the group (a
		 * replacement whose QUERY went unanswered), and is not let through.
		 */
		again = released && had_arrived && net->peer_state[from] == DDSS_TP_PEER_UP;
		stale = released && !had_arrived;
		last = arrive_locked(net, from, m.epoch);
	} else if (m.kind == BARRIER_RELEASE && from == 1)
		release_locked(net, m.epoch);
	else if (m.kind == BARRIER_QUERY && net->env.rank == 1 && from != 1)
		answer = true, state = net->barrier_released;
	else if (m.kind == BARRIER_STATE && from == 1 && (net->barrier_asked || net->env.running)) {
		if (net->barrier_asked) { /* else the answer to a repeated QUERY: had it */
			net->barrier_asked = false;
			net->barrier_epoch = net->barrier_released = m.epoch;
			pthread_cond_broadcast(&net->cv);
		}
	} else
		DDSS_WARN("unexpected barrier message %u from rank %u", m.kind, from);
	pthread_mutex_unlock(&net->mu);
	if (last)
		release_others(net, m.epoch);
	if (again) {
		DDSS_INFO("barrier %u: rank %u arrived again after its release (lost, or crossed "
			  "on the way): released again", m.epoch, from);
		if (send_barrier(net, from, BARRIER_RELEASE, m.epoch))
			DDSS_INFO("barrier %u: cannot release rank %u again", m.epoch, from);
	}
	if (stale)
		DDSS_WARN("barrier %u: rank %u arrived at it after it was released without that "
			  "rank: it counts barriers from another epoch than the group", m.epoch, from);
	if (answer && send_barrier(net, from, BARRIER_STATE, state))
		DDSS_WARN("cannot tell rank %u the group's barrier epoch", from);
}

/* mu held: a rank this barrier depends on went down (coordinator mode: the coordinator
 * only; the view settles the others' deaths, and complete_locked stops counting them). */
static bool needed_rank_down(struct ddss_net *net)
{
	if (net->env.rank != 1)
		return net->peer_state[1] == DDSS_TP_PEER_DOWN;
	for (uint32_t r = 2; !net->env.coord && r <= net->env.size; r++)
		if (net->peer_state[r] == DDSS_TP_PEER_DOWN)
			return true;
	return false;
}

/*
 * mu held, @epoch failed with @err: say whom it waited for. A rank that is merely slow (its
 * work between two barriers outlasts the timeout) and a message that never came look alike
 * at the waiting rank; the coordinator's list of ranks that have not arrived tells them
 * apart, also when the barrier ended because a rank went down.
 */
static void warn_failed_locked(struct ddss_net *net, uint32_t epoch, int err, int timeout_ms)
{
	char missing[128] = "";
	size_t used = 0;
	uint32_t r;

	if (net->env.rank != 1) {
		if (err == -ETIMEDOUT)
			DDSS_WARN("barrier %u: not released by rank 1 within %d ms", epoch,
				  timeout_ms);
		else
			DDSS_WARN("barrier %u: rank 1 went down before releasing it", epoch);
		return;
	}
	/* Room for one more number and ", ..." at every step. */
	for (r = 1; r <= net->env.size && used < sizeof(missing) - 20; r++)
		if ((int32_t)(net->barrier_arrived[r] - epoch) < 0 && counted(net, r, epoch))
			used += (size_t)snprintf(missing + used, sizeof(missing) - used, "%s%u",
						 used ? ", " : "", r);
	if (r <= net->env.size)
		strcat(missing, ", ...");
	if (err == -ETIMEDOUT)
		DDSS_WARN("barrier %u: rank(s) %s had not arrived within %d ms", epoch, missing,
			  timeout_ms);
	else
		DDSS_WARN("barrier %u: rank(s) %s had not arrived when a rank went down", epoch,
			  missing);
}

int ddss_net_barrier(struct ddss_net *net, int timeout_ms)
{
	int64_t deadline, resend_at;
	uint32_t epoch;
	int r = 0;

	if (timeout_ms < 0)
		timeout_ms = net->env.connect_timeout_ms;
	deadline = ddss_now_ns() + (int64_t)timeout_ms * 1000000;
	pthread_mutex_lock(&net->mu);
	epoch = ++net->barrier_epoch;
	if (net->env.rank == 1) {
		if (arrive_locked(net, 1, epoch)) {
			pthread_mutex_unlock(&net->mu);
			release_others(net, epoch);
			pthread_mutex_lock(&net->mu);
		}
	} else {
		pthread_mutex_unlock(&net->mu);
		/* Outside mu: sending may connect, and the handshake must not wait for us. */
		r = send_barrier(net, 1, BARRIER_ARRIVE, epoch);
		pthread_mutex_lock(&net->mu);
	}
	resend_at = ddss_now_ns() + (int64_t)BARRIER_RESEND_MS * 1000000;
	while (!r && (int32_t)(net->barrier_released - epoch) < 0) {
		int64_t now = ddss_now_ns();
		bool repeat;

		if (needed_rank_down(net)) {
			r = -EHOSTDOWN;
			break;
		}
		if (now >= deadline) {
			r = -ETIMEDOUT;
			break;
		}
		/* No repeat in the last interval: a send may connect, which takes a while. */
		repeat = net->env.rank != 1 &&
			 deadline - now >= (int64_t)BARRIER_RESEND_MS * 1000000;
		if (repeat && now >= resend_at) {
			int err = repeat_locked(net, BARRIER_ARRIVE, epoch, &resend_at);

			if (err == -EHOSTDOWN) { /* refused: gone (else the timeout tells) */
				r = err;
				break;
			}
			continue;
		}
		ddss_net_cond_wait(net, repeat && resend_at < deadline ? resend_at : deadline);
		/* Coordinator mode: the rank it waited for may have left the view meanwhile. */
		if (!r && net->env.rank == 1 && net->env.coord && complete_locked(net, epoch)) {
			pthread_mutex_unlock(&net->mu);
			release_others(net, epoch);
			pthread_mutex_lock(&net->mu);
		}
	}
	if (r == -ETIMEDOUT || r == -EHOSTDOWN)
		warn_failed_locked(net, epoch, r, timeout_ms);
	pthread_mutex_unlock(&net->mu);
	if (!r)
		ddss_tp_set_formed(net->tp); /* every rank has been up */
	return r;
}

/* A replacement (coordinator mode): reach every other member of the start view; each lets
 * us in once it has applied the view we joined in (net/readmit.c), so a refusal is asked
 * again until the connect timeout. */
static int enter_running(struct ddss_net *net)
{
	int64_t deadline = ddss_now_ns() + (int64_t)net->env.connect_timeout_ms * 1000000;

	for (uint32_t r = 1; r <= net->env.size; r++) {
		int err;

		/* Only the members of the view we joined in: a free or dead slot has nobody
		 * to let us in (a process that takes it later reaches us). */
		if (r == net->env.rank || !net->env.incarnations || !net->env.incarnations[r])
			continue;
		for (;;) {
			err = ddss_tp_peer_connect(net->tp, r);
			if (!err || ddss_now_ns() >= deadline)
				break;
			/* Bounded retry: the other side applies the view on its own thread. */
			struct timespec ts = { 0, 20 * 1000000 };
			nanosleep(&ts, NULL);
		}
		if (err) {
			DDSS_ERR("replacing rank %u: rank %u did not let this process in: %s",
				 net->env.rank, r, strerror(-err));
			return err;
		}
	}
	/*
	 * The others passed the start barrier, and maybe more: count on from the last one
	 * rank 1 released. It counts us from the next one (we are let in there already).
	 */
	pthread_mutex_lock(&net->mu);
	net->barrier_epoch = net->barrier_released = 1;
	net->barrier_asked = net->env.rank != 1;
	pthread_mutex_unlock(&net->mu);
	if (net->env.rank != 1) {
		int64_t resend_at = 0; /* ask at once */

		pthread_mutex_lock(&net->mu);
		/* Asked again every BARRIER_RESEND_MS: the question or its answer may be lost. */
		for (int64_t now = ddss_now_ns(); net->barrier_asked && now < deadline &&
		     !needed_rank_down(net); now = ddss_now_ns()) {
			if (now < resend_at)
				ddss_net_cond_wait(net, resend_at < deadline ? resend_at : deadline);
			else if (repeat_locked(net, BARRIER_QUERY, 0, &resend_at) == -EHOSTDOWN)
				break; /* rank 1 is gone: nobody to answer */
		}
		if (net->barrier_asked)
			DDSS_WARN("rank 1 did not say which barrier the group is at: counting from the "
				  "start barrier");
		net->barrier_asked = false;
		pthread_mutex_unlock(&net->mu);
	}
	ddss_tp_set_formed(net->tp);
	return 0;
}

int ddss_net_begin(struct ddss_net *net)
{
	int r = net->env.running ? enter_running(net) : ddss_net_barrier(net, -1);

	if (!r && net->env.coord)
		ddss_coord_set_serving(net->env.coord);
	return r;
}
