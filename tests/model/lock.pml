/*
 * Promela model of the N-CoSED lock protocol of docs/locks.md (shared/exclusive lock over
 * W = [T | S], DQNL queue of exclusive waiters, drain word D = [C | R], shared-waiter
 * entries, and with -DFAIR the ticket/turn variant over K and N). check.sh runs it.
 *
 * What is modelled, and how:
 *  - NP processes (waiter ids 1..NP; 0 = none), each doing ITERS acquire/release rounds,
 *    choosing shared or exclusive (and with -DTRY also the two try-locks) each round.
 *    A process stands for one waiter slot reused round after round.
 *  - The home's words W, D, K, N are globals; every remote atomic (FA, CAS) is one
 *    atomic{} step, an RDMA write to the home (D = 0) is one step.
 *  - Each waiter record (next_s, next, grant, entry[]) is a set of globals; every RDMA
 *    write into a record is one step, the successor's two writes (next_s, then next) are
 *    two steps in that order. Waiting = a blocking guard on the record (poll mode), so the
 *    wake-up notifications carry no information and are not modelled. A waiter's local
 *    reads of its own record are single steps.
 *  - Drain notifications: a releaser does FA(D, 1) in one step and, in a later step,
 *    increments the closer's `drained` (asynchronous, as the handler counting them).
 *    `drained` is reset when the slot is taken (exclusive step 1), as src/lock does.
 *  - The shared grants of exclusive release step 3 land in any order (one step each,
 *    clearing the entry with it: no one else touches my entries then); the grant to the
 *    exclusive successor lands only after all of them (step 3 waits for the writes).
 *  - Entries hold the shared waiter's id only (the [k+1 | ...] tag adds nothing here).
 *    Entry overflow (more than 64 shared requests behind one tail, the "retried while
 *    the entry is taken" case) is NOT modelled: the arrays have NP entries per record,
 *    which the model asserts is enough (k < NP and the entry is free at the CAS).
 *  - Timeouts (a background thread finishes the acquire and releases at once) behave as an
 *    acquire plus an immediate release and are not modelled separately; nor are failures,
 *    DQNL-only and SRSL.
 *
 * Properties (all asserts; check.sh runs spin's safety search without -E, so deadlocks,
 * i.e. invalid end states, are errors too; there are no end labels: every process must
 * finish its rounds):
 *  (a) mutual exclusion: ghost counts nex / nsh of exclusive / shared holders;
 *  (b) several shared holders at once is reachable: -DREACH=1 asserts nsh < 2,
 *      -DREACH=2 asserts that never two holders granted by one exclusive release hold
 *      together; check.sh expects both runs to FAIL (a violation = a witness);
 *  (c) no deadlock: invalid end states;
 *  (d) FIFO hand-over: ghost queue of the exclusive requests in the order they swapped
 *      themselves in as tail, checked at each exclusive entry;
 *  (e) no carry / borrow: S <= NP after every increment, S > 0 before every decrement;
 *  plus the drain invariants: the closer finds C == 0, a releaser's notification only
 *  goes to the registered closer, and at D = 0 the word is exactly [me | s]; the record
 *  invariants: a shared request's entry is free, a releasing tail has no entry left
 *  behind; and at the end of all rounds W == 0, D == 0, K == N, no entry is left.
 *
 * Deliberately broken variants (check.sh expects each to FAIL):
 *  -DBUG_BLIND_RELEASE  exclusive release with next == 0 reads W and writes [0 | S] back
 *                       (a plain write instead of the CAS: loses a racing FA / swap);
 *  -DBUG_NO_DRAIN       the closer of an epoch does not wait for its shared holders;
 *  -DBUG_NO_GRANT_WAIT  an exclusive request with a predecessor does not wait for its
 *                       grant (caught by the mutual exclusion / FIFO asserts).
 * Exploratory: -DPOSTED_D_RESET makes the closer's D = 0 write a posted RDMA write that
 * lands at any later point before the closer's next operation at the home (same QP);
 * the doc does not say the closer waits for its completion before it holds. spin finds
 * a stale closer in D, then mutual exclusion violations: the write must complete (or be
 * replaced by an atomic whose result is awaited) before step 7.
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

/* home words */
byte W_T, W_S;    /* W = [T | S] */
byte D_C, D_R;    /* D = [C | R] */
byte K, N;      /* fair: ticket, turn */

/* waiter records, index = waiter id (1..NP) */
byte next_s[NP + 1];
byte nxt[NP + 1];
bit grant[NP + 1];
byte entry[(NP + 1) * NP];  /* entry[id * NP + k] = id of shared request k behind id */
byte drained[NP + 1];       /* the slot's local count of drain notifications */

/* ghosts */
byte nex, nsh;        /* exclusive / shared holders */
byte xq[NP];          /* exclusive requests in swap order (circular) */
byte xqh, xqt;
#ifdef POSTED_D_RESET
byte dpend;           /* the closer whose D = 0 write is in flight (0 = none) */
#endif

#define E(id, k) entry[(id) * NP + (k)]

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

/* Step 3 of exclusive release: one shared grant lands (any order). */
#define GRANT_ONE(k) \
	:: atomic { s > k && E(me, k) != 0 -> SET_SG(E(me, k)); grant[E(me, k)] = 1; \
	            E(me, k) = 0 }

#ifdef POSTED_D_RESET
/* The home executes my operations in order (one QP): my next home access waits for it. */
#define HOME_ORDER (dpend != me)
#else
#define HOME_ORDER skip
#endif

#ifdef POSTED_D_RESET
active proctype DWrite() {
end:	do
	:: atomic { dpend != 0 -> D_C = 0; D_R = 0; dpend = 0 }
	od
}
#endif

proctype P(byte me) {
	byte it, p, s, c, q, x, t, vT, k, oldC;
	bit ok;

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
		skip;
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
		/* 6. drain the s shared requests of the closed epoch */
#ifndef BUG_NO_DRAIN
		if
		:: s > 0 ->
			atomic { assert(D_C == 0); c = D_R; D_C = me };
			assert(c <= s);
			drained[me] == s - c;
#ifdef POSTED_D_RESET
			atomic { assert(D_C == me && D_R == s); dpend = me }
#else
			atomic { assert(D_C == me && D_R == s); D_C = 0; D_R = 0 }
#endif
		:: else
		fi;
#endif
		/* 7. hold */
		atomic {
			assert(nex == 0 && nsh == 0);
			nex++;
			assert(xq[xqh] == me);
			xq[xqh] = 0; xqh = (xqh + 1) % NP
		}
		goto exclusive_release;

exclusive_release:
		nex--;
		/* 1. no successor announced: try to make my epoch the idle one */
		if
		:: nxt[me] == 0 ->
			HOME_ORDER;
			x = 0;
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
				:: !ok && vT == me
				:: else -> break
				fi
			od;
#endif
			if
			:: ok -> s = x; GEN_INC; goto grant_shared
			:: else -> nxt[me] != 0   /* transient: the successor will announce */
			fi
		:: else
		fi;
		/* 2. */
		q = nxt[me];
		s = next_s[me];
		GEN_INC;
grant_shared:
		/* 3. wait for my s entries, then grant them all (any order), wait for the writes */
		assert(s < NP);
		k = 0;
		do
		:: k < s -> E(me, k) != 0; k++
		:: else -> break
		od;
		do
		GRANT_ONE(0)
		GRANT_ONE(1)
#if NP > 2
		GRANT_ONE(2)
#endif
#if NP > 3
		GRANT_ONE(3)
#endif
#if NP > 4
		GRANT_ONE(4)
#endif
		:: else -> break
		od;
		/* nothing else may have queued behind me */
		k = 0;
		do
		:: k < NP -> assert(E(me, k) == 0); k++
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
		grant[me] = 0;
		atomic { vT = W_T; k = W_S; W_S++; assert(W_S <= NP) }
		if
		:: vT == 0 -> skip /* 2. idle epoch: granted at once */
		:: else ->
			/* 3. request k of vT's epoch */
			assert(k < NP);
			atomic { assert(E(vT, k) == 0); E(vT, k) = me };
			grant[me] != 0
		fi;
		goto shared_hold;

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
		/* shared release 1: CAS(W, [0 | x], [0 | x - 1]) from x = 1 */
		x = 1;
		do
		:: atomic {
			if
			:: W_T == 0 && W_S == x -> assert(W_S > 0); W_S--; ok = 1
			:: else -> vT = W_T; x = W_S; ok = 0
			fi }
			if
			:: ok -> break
			:: !ok && vT == 0
			:: else -> break
			fi
		od;
		if
		:: ok -> skip
		:: else ->
			/* 2. my epoch was closed: count me in D, notify the closer if registered */
			atomic { oldC = D_C; D_R++; assert(D_R <= NP) };
			if
			:: oldC != 0 -> atomic { assert(D_C == oldC); drained[oldC]++ }
			:: else
			fi
		fi;
		goto next_round;

#ifdef TRY
try_exclusive:
		skip;
		d_step { next_s[me] = 0; nxt[me] = 0; grant[me] = 0; drained[me] = 0 }
		atomic {
			if
			:: W_T == 0 && W_S == 0 ->
				W_T = me; ok = 1;
				xq[xqt] = me; xqt = (xqt + 1) % NP
			:: else -> ok = 0
			fi }
		if
		:: ok ->
			atomic {
				assert(nex == 0 && nsh == 0);
				nex++;
				assert(xq[xqh] == me);
				xq[xqh] = 0; xqh = (xqh + 1) % NP
			}
			goto exclusive_release
		:: else -> goto next_round   /* -EBUSY */
		fi;

try_shared:
		x = 0;
		do
		:: atomic {
			if
			:: W_T == 0 && W_S == x -> W_S++; assert(W_S <= NP); ok = 1
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
		         oldC = 0; ok = 0 }
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
	/* all rounds done: every count was taken out again, nothing left queued */
	_nr_pr == OTHERS;
	assert(W_T == 0 && W_S == 0 && D_C == 0 && D_R == 0 && K == N);
	assert(nex == 0 && nsh == 0 && xqh == xqt);
	i = 0;
	do
	:: i < (NP + 1) * NP -> assert(entry[i] == 0); i++
	:: else -> break
	od
}
