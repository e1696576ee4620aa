/*
 * Promela model of the N-CoSED lock protocol of docs/locks.md (as of commit 6514160):
 * shared/exclusive lock over W = [T | S] (S counts shared arrivals, never decremented),
 * DQNL queue of exclusive waiters, drain word D = [C | R] (R counts shared releases, one
 * FA each), shared-waiter entries, the exclusive release that grants registered shared
 * requests before its CAS, the carry reset, the try-locks (-DTRY), and with -DFAIR the
 * ticket/turn variant over K and N. check.sh runs it.
 *
 * What is modelled, and how:
 *  - NP processes (waiter ids 1..NP; 0 = none), each doing ITERS acquire/release rounds,
 *    choosing shared or exclusive (with -DTRY also try-exclusive / try-shared) each round.
 *    A process stands for one waiter slot reused round after round.
 *  - The home's words W, D, K, N are globals; every remote atomic (FA, CAS) and every
 *    remote read or write of them is one atomic{} step.
 *  - Each waiter record (next_s, next, grant, entry[]) is a set of globals; every RDMA
 *    write into a record is one step, the successor's two writes (next_s, then next) are
 *    two steps in that order. Waiting = a blocking guard on the record (poll mode); the
 *    wake-up notifications carry no information and are not modelled, and the event-mode
 *    grant (a notification whose handler sets `grant`) is, like the poll-mode grant, one
 *    step that sets `grant`. A waiter's reads of its own record are single steps.
 *  - Drain notifications: a releaser does FA(D, 1) in one step and, in a later step,
 *    increments the closer's `drained` (asynchronous, as the handler counting them).
 *    `drained` is reset when the slot is taken (exclusive step 1), as src/lock does.
 *  - Exclusive release: the grants of registered shared requests (before the CAS, between
 *    its retries, and after it) land one step each, in any order among those registered;
 *    the releaser remembers which indices it granted (local bitmask gm). The grant of the
 *    exclusive successor comes after all of them.
 *  - Carry reset: the threshold 2^31 is the macro SHALF (default 2, so the path runs): a
 *    shared holder whose arrival saw S >= SHALF with T == 0 runs one exclusive acquire and
 *    release after its own release (part of the same round).
 *  - Entries hold the shared waiter's id (sealed in the code, lock_int.h: nothing to model). The `ovf`
 *    stack for k >= 64 is NOT modelled: each record has KMAX = (NP - 1) * ITERS entries, enough
 *    for every arrival of the model, which asserts k < KMAX and that the entry is free.
 *  - Timeouts (a background thread finishes the acquire and releases at once) behave as an
 *    acquire plus an immediate release and are not modelled separately; nor are failures,
 *    DQNL-only and SRSL.
 *
 * Properties (asserts; check.sh runs spin's safety search without -E, so deadlocks, i.e.
 * invalid end states, are errors too; there are no end labels: every process must finish
 * its rounds):
 *  (a) mutual exclusion: ghost counts nex / nsh of exclusive / shared holders;
 *  (b) several shared holders at once is reachable: -DREACH=1 asserts nsh < 2,
 *      -DREACH=2 asserts that never two holders granted by one exclusive release hold
 *      together; check.sh expects both runs to FAIL (a violation = a witness);
 *  (c) no deadlock: invalid end states;
 *  (d) FIFO hand-over: ghost queue of the exclusive requests in the order they swapped
 *      themselves in as tail, checked at each exclusive entry;
 *  (e) no carry: S <= SHALF + NP after every increment (each process arrives at most once
 *      more after S reached the reset threshold before an exclusive swap resets it), and
 *      R <= SHALF + NP; there is no decrement of S or R anywhere (no borrow);
 *  plus the drain invariants: the closer finds C == 0 and c <= s, a releaser's
 *  notification only goes to the registered closer, at D = 0 the word is exactly
 *  [me | s], and D == 0 whenever an exclusive holder enters; the record invariants: a
 *  shared request's entry is free, a releasing tail has no entry left behind; and at the
 *  end of all rounds T == 0, D == [0 | S] (every arrival of the last epoch released),
 *  K == N, no entry left.
 *
 * Deliberately broken variants (check.sh expects each to FAIL):
 *  -DBUG_BLIND_RELEASE  exclusive release with next == 0 reads W and writes [0 | S] back
 *                       (a plain write instead of the CAS: loses a racing FA / swap);
 *  -DBUG_NO_DRAIN       the closer of an epoch does not wait for its shared holders;
 *  -DBUG_NO_GRANT_WAIT  an exclusive request with a predecessor does not wait for its
 *                       grant.
 * -DBUG_TRY_BLIND_RESET  the first version of try-exclusive (found by this model): with
 * -DTRY spin finds an ABA on W. Try-X reads W = [0 | s] and D = [0 | s]; before its
 * second CAS an exclusive request swaps [0 | s] out, drains nothing, holds, releases to
 * [0 | 0], and a shared request arrives in the new idle epoch (W = [0 | 1] again, s = 1)
 * and holds. The second CAS(W, [0 | s], [me | 0]) succeeds on the new epoch: try-X holds
 * exclusively beside that shared holder, and its D = 0 write loses the holder's release
 * count. The protocol (and this model by default) therefore registers as closer after the
 * second CAS, as in exclusive acquire step 6 (FA(D, me << 32), wait for s - c drain
 * notifications, reset D).
 *
 * Exploratory: -DPOSTED_D_RESET makes the D = 0 writes (closer, try-exclusive) posted
 * RDMA writes that land at any later point before the writer's next operation at the
 * home (same QP); the doc does not say the writer waits for their completion.
 */

#ifndef NP
#define NP 3
#endif
#ifndef ITERS
#define ITERS 2
#endif
#ifndef REACH
#define REACH 0
#endif
#ifndef SHALF
#define SHALF 2
#endif
#define KMAX ((NP - 1) * ITERS)
#define SMAX (SHALF + NP)

/* home words */
byte W_T, W_S;  /* W = [T | S] */
byte D_C, D_R;  /* D = [C | R] */
byte K, N;      /* fair: ticket, turn */

/* waiter records, index = waiter id (1..NP) */
byte next_s[NP + 1];
byte nxt[NP + 1];
bit grant[NP + 1];
byte entry[(NP + 1) * KMAX]; /* entry[id * KMAX + k] = id of shared request k behind id */
byte drained[NP + 1];        /* the slot's local count of drain notifications */

/* ghosts */
byte nex, nsh;        /* exclusive / shared holders */
byte xq[NP];          /* exclusive requests in swap order (circular) */
byte xqh, xqt;
#ifdef POSTED_D_RESET
byte dpend;           /* the process whose D = 0 write is in flight (0 = none) */
#endif

#define E(id, k) entry[(id) * KMAX + (k)]

#if REACH == 2
byte gen;             /* exclusive releases so far */
byte sg[NP + 1];      /* the release that granted a shared waiter (0 = idle epoch) */
byte hg[NP + 1];      /* the same, for the shared holders */
#define SET_SG(id) sg[id] = gen
#define GEN_INC gen++
#else
#define SET_SG(id) skip
#define GEN_INC skip
#endif

/* Exclusive release: grant my shared request k if it is below lim, registered and not
 * granted yet (one step: the grant lands, my entry is cleared, gm remembers it). */
#define GR(k, lim) \
	:: atomic { k < (lim) && (gm & (1 << k)) == 0 && E(me, k) != 0 -> \
	            SET_SG(E(me, k)); grant[E(me, k)] = 1; E(me, k) = 0; gm = gm | (1 << k) }

/* one option per entry index below KMAX (gm is a byte: at most 8) */
#if KMAX > 8
#error "KMAX > 8: widen gm and GRANTS"
#elif KMAX > 6
#define GRANTS(lim) GR(0, lim) GR(1, lim) GR(2, lim) GR(3, lim) GR(4, lim) GR(5, lim) \
                    GR(6, lim) GR(7, lim)
#elif KMAX > 4
#define GRANTS(lim) GR(0, lim) GR(1, lim) GR(2, lim) GR(3, lim) GR(4, lim) GR(5, lim)
#elif KMAX > 3
#define GRANTS(lim) GR(0, lim) GR(1, lim) GR(2, lim) GR(3, lim)
#elif KMAX > 2
#define GRANTS(lim) GR(0, lim) GR(1, lim) GR(2, lim)
#else
#define GRANTS(lim) GR(0, lim) GR(1, lim)
#endif
#define ALL(lim) ((1 << (lim)) - 1)

#ifdef POSTED_D_RESET
#define D_RESET dpend = me
/* The home executes my operations in order (one QP): my next home access waits for it. */
#define HOME_ORDER (dpend != me)
active proctype DWrite() {
end:	do
	:: atomic { dpend != 0 -> D_C = 0; D_R = 0; dpend = 0 }
	od
}
#else
#define D_RESET D_C = 0; D_R = 0
#define HOME_ORDER skip
#endif

/* An exclusive holder enters: mutual exclusion, FIFO, and D is free. */
#ifdef POSTED_D_RESET
#define D_FREE skip
#else
#define D_FREE assert(D_C == 0 && D_R == 0)
#endif
#define X_ENTER \
	atomic { \
		assert(nex == 0 && nsh == 0); \
		nex++; \
		assert(xq[xqh] == me); \
		xq[xqh] = 0; xqh = (xqh + 1) % NP; \
		D_FREE \
	}

proctype P(byte me) {
	byte it, p, s, c, q, x, t, vT, k, oldC, gm, dc, dr;
	bit ok, duty;

	do
	:: it < ITERS ->
		if
		:: goto exclusive
		:: goto shared
#ifdef TRY
		:: goto try_exclusive
		:: goto try_shared
#endif
		fi;

exclusive:
		HOME_ORDER;
		/* 1. clear my record (and take the slot: drained = 0) */
		d_step { next_s[me] = 0; nxt[me] = 0; grant[me] = 0; drained[me] = 0 }
#ifdef FAIR
		/* 2. ticket, then wait for the turn */
		atomic { t = K; K++ }
		(N == t);
#endif
		/* 3. CAS(W, 0, [me | 0]), retried with the returned value */
		p = 0; s = 0;
		do
		:: atomic {
			if
			:: W_T == p && W_S == s ->
				W_T = me; W_S = 0; ok = 1;
				xq[xqt] = me; xqt = (xqt + 1) % NP
			:: else -> p = W_T; s = W_S; ok = 0
			fi }
			if
			:: ok -> break
			:: else
			fi
		od;
#ifdef FAIR
		/* 4. pass the turn */
		atomic { assert(N == t); N++ }
#endif
		/* 5. announce to the predecessor, wait for the grant */
		if
		:: p != 0 ->
			next_s[p] = s;
			nxt[p] = me;
#ifndef BUG_NO_GRANT_WAIT
			grant[me] != 0
#else
			skip
#endif
		:: else
		fi;
		/* 6. drain the s shared arrivals of the closed epoch */
#ifndef BUG_NO_DRAIN
		if
		:: s > 0 ->
			atomic { assert(D_C == 0); c = D_R; D_C = me };
			assert(c <= s);
			drained[me] == s - c;
			atomic { assert(D_C == me && D_R == s); D_RESET }
		:: else
		fi;
#endif
		/* 7. hold */
		X_ENTER;

exclusive_release:
		nex--;
		GEN_INC;
		gm = 0;
		/* 1. no successor announced: grant the registered, CAS, grant the rest */
		if
		:: nxt[me] == 0 ->
			HOME_ORDER;
			do
			GRANTS(KMAX)
			:: else -> break
			od;
			/* x starts as the number granted */
			atomic {
				x = 0; k = 0;
				do
				:: k < KMAX -> if :: (gm & (1 << k)) != 0 -> x++ :: else fi; k++
				:: else -> break
				od;
				k = 0
			}
#ifdef BUG_BLIND_RELEASE
			d_step { vT = W_T; x = W_S };
			if
			:: vT == me -> d_step { W_T = 0; W_S = x; ok = 1 }
			:: else -> ok = 0
			fi;
#else
			do
			:: atomic {
				if
				:: W_T == me && W_S == x -> W_T = 0; ok = 1
				:: else -> vT = W_T; x = W_S; ok = 0
				fi }
				if
				:: ok -> break
				:: !ok && vT == me ->
					do
					GRANTS(KMAX)
					:: else -> break
					od
				:: else -> break
				fi
			od;
#endif
			if
			:: ok -> s = x; q = 0; goto grant_rest
			:: else -> nxt[me] != 0   /* transient: the successor will announce */
			fi
		:: else
		fi;
		/* 2. */
		q = nxt[me];
		s = next_s[me];
grant_rest:
		/* 3. grant my s shared requests not granted yet, waiting for them to register */
		assert(s <= KMAX);
		do
		GRANTS(s)
		:: (gm & ALL(s)) == ALL(s) -> break
		od;
		assert(gm == ALL(s));   /* nothing granted beyond my s */
		/* nothing else may have queued behind me */
		k = 0;
		do
		:: k < KMAX -> assert(E(me, k) == 0); k++
		:: else -> break
		od;
		/* 4. hand over to the successor */
		if
		:: q != 0 -> grant[q] = 1
		:: else
		fi;
		goto next_round;

shared:
		/* 1. */
		HOME_ORDER;
		grant[me] = 0;
		atomic {
			vT = W_T; k = W_S; W_S++; assert(W_S <= SMAX);
			duty = (vT == 0 && k >= SHALF)
		}
		if
		:: vT == 0 -> skip /* 2. idle epoch: granted at once */
		:: else ->
			/* 3. request k of vT's epoch: one write into its entry k */
			assert(k < KMAX);
			atomic { assert(E(vT, k) == 0); E(vT, k) = me };
			grant[me] != 0
		fi;

shared_hold:
		atomic {
			assert(nex == 0);
			nsh++;
#if REACH == 1
			assert(nsh < 2);
#endif
#if REACH == 2
			/* witness wanted: two holders granted by the same exclusive release */
			hg[me] = sg[me]; sg[me] = 0;
			k = 1;
			do
			:: k <= NP -> assert(hg[me] == 0 || k == me || hg[k] != hg[me]); k++
			:: else -> break
			od;
			k = 0
#endif
		}
		atomic {
			nsh--;
#if REACH == 2
			hg[me] = 0
#endif
		}
		/* shared release: FA(D, 1); notify the closer if one registered */
		HOME_ORDER;
		atomic { oldC = D_C; D_R++; assert(D_R <= SMAX) };
		if
		:: oldC != 0 -> atomic { assert(D_C == oldC); drained[oldC]++ }
		:: else
		fi;
		/* carry reset: one empty exclusive acquire and release */
		if
		:: duty -> duty = 0; goto exclusive
		:: else -> goto next_round
		fi;

#ifdef TRY
try_exclusive:
		HOME_ORDER;
		d_step { next_s[me] = 0; nxt[me] = 0; grant[me] = 0; drained[me] = 0 }
		atomic {
			if
			:: W_T == 0 && W_S == 0 ->
				W_T = me; ok = 1;
				xq[xqt] = me; xqt = (xqt + 1) % NP
			:: else -> vT = W_T; s = W_S; ok = 0
			fi }
		if
		:: ok -> skip
		:: !ok && vT == 0 ->
			/* [0 | s], s > 0: free only if D == [0 | s] */
			atomic { dc = D_C; dr = D_R };
			if
			:: dc == 0 && dr == s ->
				atomic {
					if
					:: W_T == 0 && W_S == s ->
						W_T = me; W_S = 0; ok = 1;
						xq[xqt] = me; xqt = (xqt + 1) % NP
					:: else -> ok = 0
					fi }
				if
#ifdef BUG_TRY_BLIND_RESET
				:: ok -> atomic { D_RESET }
#else
				/* register as the closer of the s arrivals, as in exclusive
				 * acquire step 6, instead of resetting D blindly (the ABA below) */
				:: ok ->
					atomic { assert(D_C == 0); c = D_R; D_C = me };
					assert(c <= s);
					drained[me] == s - c;
					atomic { assert(D_C == me && D_R == s); D_RESET }
#endif
				:: else
				fi
			:: else
			fi
		:: else
		fi;
		if
		:: ok -> X_ENTER; goto exclusive_release
		:: else -> goto next_round   /* -EBUSY */
		fi;

try_shared:
		HOME_ORDER;
		x = 0;
		do
		:: atomic {
			if
			:: W_T == 0 && W_S == x ->
				W_S++; assert(W_S <= SMAX); ok = 1; duty = (x >= SHALF)
			:: else -> vT = W_T; x = W_S; ok = 0
			fi }
			if
			:: ok -> break
			:: !ok && vT == 0
			:: else -> break
			fi
		od;
		if
		:: ok -> goto shared_hold
		:: else -> goto next_round   /* -EBUSY */
		fi;
#endif

next_round:
		HOME_ORDER;
		d_step { it++; p = 0; s = 0; c = 0; q = 0; x = 0; t = 0; vT = 0; k = 0;
		         oldC = 0; gm = 0; dc = 0; dr = 0; ok = 0; duty = 0 }
	:: else -> break
	od
}

#ifdef POSTED_D_RESET
#define OTHERS 2
#else
#define OTHERS 1
#endif

init {
	byte i;
	atomic {
		i = 1;
		do
		:: i <= NP -> run P(i); i++
		:: else -> break
		od
	}
	/* all rounds done: the last epoch is idle and every arrival of it released */
	_nr_pr == OTHERS;
	assert(W_T == 0 && D_C == 0 && D_R == W_S && K == N);
	assert(nex == 0 && nsh == 0 && xqh == xqt);
	i = 0;
	do
	:: i < (NP + 1) * KMAX -> assert(entry[i] == 0); i++
	:: else -> break
	od
}
