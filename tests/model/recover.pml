/*
 * Promela model of N-CoSED lock RECOVERY (docs/failure.md "N-CoSED and DQNL: recovered by
 * the home"; src/lock/lock_agent.c, lock_census.c, lock_recover.c, lock_queue.c,
 * lock_grant.c, lock_posted.c, lock_api.c requeue). tests/model/lock.pml covers the
 * protocol without failures; this file adds a rank that dies. check.sh runs it.
 *
 * Ranks 1 (the home: its words W, D; it runs the recovery agents), 2 and 3. Rank 3 may go
 * silent (die) at any step. Processes:
 *  - Cl(0): a client thread at rank 2 (waiter ids 1..3, one per attempt);
 *  - Cl(1), Cl(2): two client threads at rank 3 (ids 4..5, 6..7): a rank with two requests
 *    at once; they die together;
 *  - Agent: the home's recovery agents, one job at a time (ids 8, 9; at most NAG runs);
 *  - Killer: kills rank 3 (or not), then the home and rank 2 each declare it dead, in
 *    either order, at any later time.
 * Each client makes one request (shared or exclusive, chosen by spin), holds, releases.
 * A request that fails (behind a dead or lost one) asks the home to recover (RECOVER) and
 * queues again with a fresh waiter id, at most NATT attempts in all (the implementation:
 * 1 + REQUEUE_ROUNDS = 5), then returns the error. Waiter ids are never reused (a failed
 * request's slot is lost in the implementation; reuse of freed slots is not modelled).
 *
 * Atomicity: every remote atomic on W or D is one step; each record write is one step (a
 * successor's next_s and next writes are one step); a census report or a survey answer of
 * one rank is one step (a snapshot of that rank under its mutex), different ranks answer
 * at different times, in any order, interleaved with everything else.
 *
 * Death: rank 3's threads stop at any statement (unless { dead3 }), and so do its
 * progress thread's answers (census reports, survey answers, FLUSH). What rank 3 had sent
 * before it died and is still in flight: grants to waiters at other ranks (gpend: they
 * land at any time until the receiver declares rank 3 dead, which either delivers them
 * first, like a killed process's socket, or drops them, like a cut-off link). Its atomics
 * on the home's words are single steps taken while alive, so after the home's declaration
 * none can execute. A rank declares rank 3 dead only after it died (no false suspicion).
 *
 * Waiting and retries: a waiter blocks on its record (grant) and fails when its
 * predecessor's slot is lost (FAIL note) or its own rank declared the predecessor's rank
 * dead. Periodic checks (the agent's census every 250 ms, a closer's drain check, a
 * release's successor census) may run at any time, but again only after something
 * changed since the last one (per-process dirty bit, set by every global change): a check
 * that would only repeat the same answer is not taken, so a wait that nothing can end
 * shows up as an invalid end state (a hang) in spin's safety search.
 *
 * Census (lock_census.c): each rank the home (or, for a release's successor census, the
 * releaser's rank) has not declared dead reports, in one step: CENSUS_SHARED (a shared hold
 * or a shared release under way), CENSUS_UNPLACED (a request whose first atomic may be
 * out), and every request past its first atomic (q_state COUNTED) except posted releases.
 * Rank 3 dead but not declared: no report (CENSUS_MISSING: census incomplete). The agent
 * then reads the queue behind itself from the records (one step) and takes the lock if no
 * flag is set and every reported request is behind it.
 *
 * Drain check (lock_recover.c on_check, on_survey, on_flush, epoch_busy_locked): the
 * closer asks the home, which counts the ranks that will FLUSH (for the idle epoch, p == 0,
 * every rank it does not see down; else p's rank unless it sees it down) and surveys every
 * rank it has not declared dead, with that count (one step: the count and the set asked
 * are taken together). A surveyed rank handles the survey in one step: for p == 0, or if
 * it is p's rank, it sends FLUSH to every rank it sees up (behind its grants on the same
 * ordered channel: rank 3's grants in flight at that moment land before its FLUSH does);
 * it then answers once it has FLUSHes from as many distinct ranks as the survey says, or,
 * if p != 0, the count is 0 and it sees p's rank up itself, from 1 (p's). A rank answers
 * busy if it holds the lock shared, releases a shared hold, or has a shared request whose
 * FA may be out (Q_COUNTING), that was admitted at once (q_pred 0), or that is granted
 * (REC_GRANT set) whatever its q_pred. Any rank that cannot answer (dead, or waiting for a
 * FLUSH that never comes) leaves the survey unanswered; the closer asks again later.
 * Clear: the closer resets D and enters.
 *
 * Lock hand-over (lock_queue.c x_release, lock_grant.c): a release without an announced
 * successor grants every shared request counted behind it before each CAS [me | x] ->
 * [0 | x]: it grants those registered (lock_grant_ready), then, while it knows of more
 * counted (x) than settled, waits for their registrations (lock_grant_more); after a while
 * (a periodic check) a census of its rank may find the missing ones dead (missing_are_dead:
 * census complete, nothing unplaced, no live shared request waiting behind it that it has
 * not collected) and it goes on without them; the op timeout may end the wait once rank 3
 * died (the release fails, its slot is lost). Only then the CAS; if it fails with the tail
 * still ours and a larger count, again. So once the word is idle no grant is pending, but
 * grants sent may still be in flight. With a successor, the same wait for next_s requests.
 *
 * Posted releases: an exclusive release whose first CAS is for [me | 0] is posted; from
 * then on until its release ends the census does not report it. The finisher thread's
 * work is modelled in the releasing thread (same steps on the words, docs/locks.md).
 *
 * Properties:
 *  - mutual exclusion and S/X compatibility among live ranks (ghost counts per rank; a dead
 *    rank's holds do not count);
 *  - every -EPROTO of src/lock/lock_queue.c with a semantic condition, as an assertion:
 *      x_acquire: "lock drain word at rank %u was %#llx (closing %u)": old.C != 0 or
 *                 old.R > s when a closer registers (FA(D, me << 32));
 *      x_release: "successor counts %u shared requests, %u already granted";
 *      x_release: "%u shared waiters registered behind us, our successor counts %u";
 *    and read_behind's -ELOOP (the others check ids for range; ids are always valid
 *    here); and a ghost assertion: when a release's CAS fails with the tail still its
 *    own, the requests it settled do not exceed the word's count (else it spins for ever);
 *  - D == 0 whenever an exclusive holder enters (the design's drain invariant; -DNO_D_FREE
 *    turns it off to see where the stale word leads);
 *  - no hang: spin's search for invalid end states (every client must end: granted and
 *    released, or failed with an error; the agent must finish its job);
 *  - at the end, if the tail is empty, D is clean for the next closer (C == 0, R <= S):
 *    otherwise the next exclusive request would log the -EPROTO above.
 *
 * The default is src/lock as it is (the fixes 1-3 below are in). The BUG_ variants are the
 * behaviour before each fix; spin must reject each:
 *  -DBUG_IDLE_SURVEY  (before the fix: lock_recover.c epoch_busy_locked / on_survey,
 *       lock_queue.c x_release) a drain check counts as busy only granted requests with
 *       q_pred == p (and q_pred == 0 ones), only p's rank FLUSHes (none for p == 0, no
 *       count in the survey), and a release without successor CASes the word to idle
 *       [me | x] -> [0 | x] first and grants its x requests afterwards (lock_grant_more).
 *       Those have q_pred == me, so while they are not granted yet, or granted but not yet
 *       holding, every rank answers "not busy", the closer of the idle epoch enters, and
 *       the shared request then holds beside it or releases into its D (no death needed).
 *       The fix (3): the release grants every counted request before its CAS to idle
 *       (above); a granted request is busy whatever its q_pred; for p == 0 every surveyed
 *       rank FLUSHes and a member waits for as many FLUSHes as the home counted.
 *  -DBUG_AGENT_STALE_D  (before lock_agent.c took_drain) an agent that took the lock by
 *       census registers in D like any closer (or, with s == 0, leaves D alone). A dead
 *       closer's registration, or a dead epoch's release count, stays in D. Fix (1): an
 *       agent that took the lock by census writes D = 0 and enters without draining.
 *  -DBUG_CHAIN_DEAD  (before the fix in lock_agent.c read_behind) reading the queue
 *       behind the agent fails when a record in it is at a dead rank: the agent never takes
 *       the lock. Fix (2): a record at a rank the home declared dead ends the chain. Needs
 *       an agent that swapped in before the death (-DNUDGE).
 *  -DBEFORE_FIXES  all three BUG_ variants: src/lock before the fixes.
 *
 *  -DBUG_LATE_REG  (lock_grant.c before its second fix) lock_grant_more's census can
 *       count as "missing, dead" a request whose registration landed after the last
 *       collect() and before the census (its rank died right after, and the census taker
 *       declared it dead: the census no longer reports it). The entry stays in the record;
 *       a later lock_grant_ready in the same release (the CAS failed because another
 *       shared request arrived) collects it and counts it again: settled exceeds the
 *       word's count, the CAS [me | settled] can never succeed (a spin on the home's word
 *       until an exclusive successor swaps in, then "successor counts %u shared requests,
 *       %u already granted" -EPROTO); a ghost assertion at the failed CAS flags it. Fix
 *       (the default): once the census says dead, collect (and grant) once more before
 *       going on: the dead can no longer write then (the census taker declared them).
 *
 * Not modelled: try-locks (Q_TRYING), fair mode (tickets and turn checks), timeouts
 * (janitors), the overflow stack, slot reuse, DQNL/SRSL, the home dying or shutting down
 * (the home never fails here, so the -EHOSTDOWN of every lock wait once the home is down
 * is not exercised), a rank that is cut off but keeps running (rank 3 stops), false
 * suspicion (a live rank declared dead), more than one death, drain notes or survey
 * messages lost in flight (a FLUSH reaches every rank that can still answer: only rank 3
 * can be seen down, and only once it died), the home declaring rank 3 dead between
 * counting the flushers and asking the ranks (one step here), a survey entry overwritten
 * at a member (LOCK_RC_SURVEYS), more than one agent job at a time (the home runs one per
 * lock, as lock_agent.c does per offset).
 *
 * Knobs: -DNATT=n attempts per rank-2 request (default 2), -DNAG=n agent runs (default
 * 2), -DM2, -DM3A, -DM3B = 1 exclusive only, 2 shared only, 3 either (default 3),
 * -DBUG_LATE_REG (above), -DNODEATH (rank 3 never dies), -DNUDGE (a RECOVER may come at
 * any time), -DNO_RANK2 (no client at rank 2: for a witness that needs only rank 3's two
 * threads), -DNEARLY=n periodic checks per wait at any moment (default 1; then only when
 * all else is blocked).
 */

#ifdef BEFORE_FIXES
#define BUG_AGENT_STALE_D
#define BUG_CHAIN_DEAD
#define BUG_IDLE_SURVEY
#endif

#ifndef NATT
#define NATT 2
#endif
#ifndef NAG
#define NAG 2
#endif
#ifndef M2
#define M2 3
#endif
#ifndef M3A
#define M3A 3
#endif
#ifndef M3B
#define M3B 3
#endif

#define NID 10   /* ids 1..3 rank 2, 4..7 rank 3, 8..9 the home's agents */
#define KMAX 3   /* shared arrivals per epoch: at most one per client */
#define SMAX 3
#define RK(i) ((i) == 0 -> 0 : ((i) <= 3 -> 2 : ((i) <= 7 -> 3 : 1)))
#define BIT(i) (1 << (i))
#define QC 1     /* q_state Q_COUNTING: first atomic may be out */
#define QD 2     /* Q_COUNTED */

/* home words */
byte W_T, W_S, D_C, D_R;
/* records and slots, index = waiter id */
byte nxt[NID], next_s[NID];
byte ent[NID * KMAX];
bit grant[NID], gpend[NID], lost[NID], posted[NID], qsh[NID];
byte qs[NID], qpred[NID], drained[NID];
/* per rank (index 1..3): shared holds, shared releases under way, exclusive holds */
byte shold[4], srel[4], nx[4];
/* failure */
bit dead3, declH, decl2;
/* recovery jobs at the home: 0 none, 1 asked, 2 the agent swapped in */
byte job, nag;
byte dirty;      /* bit ci: something changed since process ci's last periodic check */
byte ndone;      /* clients finished */
byte gaveup;     /* ghost: requests that returned an error */

#define CHG dirty = 15
#ifndef NEARLY
#define NEARLY 1
#endif
/* May process ci run its periodic check now? NEARLY times per wait at any moment, then
 * only once nothing else can move (the 250 ms / 1 s timer firing while the system is
 * quiet) and something changed since its last check. */
#define MAYCHECK(ci) (nchk < NEARLY || (timeout && (dirty & BIT(ci))))
#define CHECKING(ci) if :: nchk < NEARLY -> nchk++ :: else fi; dirty = dirty & ~BIT(ci)
/* does rank m see rank 3 down (declared it dead)? */
#define DECLV(m) ((m) == 1 -> declH : ((m) == 2 -> decl2 : 0))
#define LIVE(m) ((m) != 3 || !dead3)
#define XFREE(m) (!LIVE(m) || (nx[m] == 0 && shold[m] == 0))
#define SFREE(m) (!LIVE(m) || nx[m] == 0)
#define POPC(g) (((g) & 1) + (((g) >> 1) & 1) + (((g) >> 2) & 1))
#define ALL(n) ((1 << (n)) - 1)
#define E(i, k) ent[(i) * KMAX + (k)]

#ifdef NO_D_FREE
#define D_FREE skip
#else
#define D_FREE assert(D_C == 0 && D_R == 0)
#endif

/* Hand the lock to waiter g: from rank 3 to another rank it may stay in flight. */
#define GIVE(g) if :: r == 3 && RK(g) != 3 -> gpend[g] = 1 :: else -> grant[g] = 1 fi

/* Exclusive release: collect and grant registered shared request k (one step; the
 * implementation collects every registered entry, whatever the count it waits for). */
#define GR(k, g) \
	:: atomic { (g) && (gm & (1 << k)) == 0 && E(id, k) != 0 -> \
		GIVE(E(id, k)); E(id, k) = 0; gm = gm | (1 << k); st++; CHG }
#define GRANTS(g) GR(0, g) GR(1, g) GR(2, g)

/* A grant in flight lands (the waiter's rank has not declared rank 3 dead yet). */
#define LAND :: atomic { gpend[id] && !grant[id] -> gpend[id] = 0; grant[id] = 1; CHG }

/* ---- census (lock_census.c): one rank's report ---- */
inline census_report(m) {
	ans = ans | BIT(m);
	if
	:: shold[m] > 0 || srel[m] > 0 -> flgS = 1
	:: else
	fi;
	k = 1;
	do
	:: k < NID ->
		if
		:: RK(k) == m && qs[k] != 0 && !posted[k] ->
			if
			:: qs[k] == QC -> flgU = 1
			:: else ->
				rep = rep | BIT(k);
				if
				:: !qsh[k] && qpred[k] == id && !grant[k] -> alive = 1
				:: else
				fi;
				/* lock_grant.c missing_are_dead: a shared request waiting behind us
				 * that we have not collected (collected: its grant is sent) */
				if
				:: qsh[k] && qpred[k] == id && !grant[k] && !gpend[k] -> wsh = 1
				:: else
				fi
			fi
		:: else
		fi;
		k++
	:: else -> break
	od;
	k = 0
}

/* Census taken by rank v (skips the ranks v declared dead; rank 3 dead and not declared
 * never answers: abort = CENSUS_MISSING). */
inline census(v) {
	ans = 0; abort = 0; flgS = 0; flgU = 0; rep = 0; alive = 0; wsh = 0;
	atomic { if :: DECLV(v) -> ans = 8 :: else fi };
	do
	:: ans == 14 || abort -> break
	:: atomic { (ans & 2) == 0 -> census_report(1) }
	:: atomic { (ans & 4) == 0 -> census_report(2) }
	:: atomic { (ans & 8) == 0 ->
		if
		:: dead3 -> abort = 1
		:: else -> census_report(3)
		fi }
	od;
	skip
}

/* ---- drain check (lock_recover.c on_check, on_survey, on_flush): the survey ---- */
/*
 * The home counts the ranks that will FLUSH (nfl, sent in the SURVEY): for the idle epoch
 * (p == 0) every rank it does not see down, else p's rank unless it sees it down. A
 * surveyed rank j handles the survey (survey_recv, one step: on_survey): it FLUSHes
 * (behind its grants, same ordered channel) to every rank it sees up if p == 0 or j is
 * p's rank, and notes how many FLUSHes it waits for: nfl, or 1 if p != 0, nfl == 0 and it
 * sees p's rank up itself (xtra). It answers once that many distinct ranks' FLUSHes came
 * (at once in the same step if they already did). Only ranks 1 and 2 can be seen down
 * by nobody; a FLUSH to rank 3 matters only while it lives, and then nobody sees it down
 * (no false suspicion): so every FLUSH sent reaches every rank that can answer, and the
 * FLUSHes rank m has are those of fdone (bit j: rank j handled the survey and flushed).
 * -DBUG_IDLE_SURVEY (the code before the fix): only p's rank flushes (none for the idle
 * epoch), the survey carries no count, and a member waits for p's rank's FLUSH iff it
 * sees p's rank up when the survey comes.
 */
#ifdef BUG_IDLE_SURVEY
#define FLUSHER(j, p) ((p) != 0 && RK(p) == (j))
#define NFL(p) 0
#else
#define FLUSHER(j, p) ((p) == 0 || RK(p) == (j))
#define NFL(p) ((p) == 0 -> (declH -> 2 : 3) : ((RK(p) == 3 && declH) -> 0 : 1))
#endif
#define GOT (((fdone >> 1) & 1) + ((fdone >> 2) & 1) + ((fdone >> 3) & 1))
#define NEED(m) (nfl + ((xtra >> (m)) & 1))
#define FLUSHED(m) (GOT >= NEED(m))
/* FLUSHes that can still come: surveyed flushers that have not handled the survey yet
 * (rank 3 only if it was asked and lives) */
#define MAYGET(p) (GOT + (FLUSHER(1, p) && (rcv & 2) == 0 -> 1 : 0) + \
		   (FLUSHER(2, p) && (rcv & 4) == 0 -> 1 : 0) + \
		   (FLUSHER(3, p) && (rcv & 8) == 0 && asked3 && !dead3 -> 1 : 0))
/* rank m got the survey but can never answer it: a FLUSH it waits for never comes */
#define STUCK(m, p) ((rcv & BIT(m)) != 0 && (ans & BIT(m)) == 0 && MAYGET(p) < NEED(m))

/* Rank m's answer (report, under its mutex): busy or not. */
inline survey_answer(m, p) {
	ans = ans | BIT(m);
	/* rank 3's grants to rank m sent before its FLUSH have landed (same channel) */
	k = 1;
	do
	:: k < NID ->
		if
		:: RK(k) == m && gpend[k] && (gah & BIT(k)) -> gpend[k] = 0; grant[k] = 1; CHG
		:: else
		fi;
		k++
	:: else -> break
	od;
	if
	:: shold[m] > 0 || srel[m] > 0 -> busy = 1
	:: else
	fi;
	k = 1;
	do
	:: k < NID ->
		if
#ifdef BUG_IDLE_SURVEY
		:: RK(k) == m && qsh[k] &&
		   (qs[k] == QC || (qs[k] == QD && (qpred[k] == 0 || (qpred[k] == p && grant[k])))) ->
			busy = 1
#else
		/* epoch_busy_locked: a granted request (REC_GRANT) is of the closer's epoch
		 * whoever granted it (no later epoch is granted while the closer waits) */
		:: RK(k) == m && qsh[k] &&
		   (qs[k] == QC || (qs[k] == QD && (qpred[k] == 0 || grant[k]))) ->
			busy = 1
#endif
		:: else
		fi;
		k++
	:: else -> break
	od;
	k = 0
}

/* Rank m handles the survey (on_survey): FLUSH if it is a flusher; answer if it has all
 * the FLUSHes it waits for. */
inline survey_recv(m, p) {
	rcv = rcv | BIT(m);
	if
	:: FLUSHER(m, p) ->
		fdone = fdone | BIT(m);
		if
		:: m == 3 ->	/* its grants in flight now travel ahead of the FLUSH */
			k = 1;
			do
			:: k < NID ->
				if
				:: gpend[k] -> gah = gah | BIT(k)
				:: else
				fi;
				k++
			:: else -> break
			od;
			k = 0
		:: else
		fi
	:: else
	fi;
	if
	:: (p) != 0 && nfl == 0 && !(RK(p) == 3 && DECLV(m)) -> xtra = xtra | BIT(m)
	:: else
	fi;
	if
	:: FLUSHED(m) -> survey_answer(m, p)
	:: else
	fi
}

inline drain_check(p) {
	ans = 0; busy = 0; abort = 0; fdone = 0; rcv = 0; xtra = 0; gah = 0;
	/* the home counts the flushers and asks every rank it has not declared dead */
	atomic { asked3 = !declH; nfl = NFL(p); if :: declH -> ans = 8 :: else fi };
	do
	:: ans == 14 || abort -> break
	:: atomic { (rcv & 2) == 0 -> survey_recv(1, p) }
	:: atomic { (rcv & 4) == 0 -> survey_recv(2, p) }
	:: atomic { (rcv & 8) == 0 && asked3 && !dead3 -> survey_recv(3, p) }
	/* a FLUSH comes (on_flush) and completes what rank m waits for */
	:: atomic { (rcv & 2) && (ans & 2) == 0 && FLUSHED(1) -> survey_answer(1, p) }
	:: atomic { (rcv & 4) && (ans & 4) == 0 && FLUSHED(2) -> survey_answer(2, p) }
	:: atomic { (rcv & 8) && (ans & 8) == 0 && !dead3 && FLUSHED(3) -> survey_answer(3, p) }
	/* rank 3 never answers, or someone waits for a FLUSH that never comes */
	:: atomic { ((ans & 8) == 0 && dead3) || STUCK(1, p) || STUCK(2, p) -> abort = 1 }
	od;
	clr = !abort && !busy
}

/* ---- the closer's drain (x_acquire STAGE_GRANTED / DRAINING, lock_drain_wait) ---- */
inline xdrain(ci) {
	if
	:: s > 0 ->
		atomic {
			/* x_acquire: "lock drain word at rank %u was %#llx (closing %u)", -EPROTO */
			assert(D_C == 0 && D_R <= s);
			drain = s - D_R; D_C = id; CHG };
		nchk = 0;
		do
		:: drained[id] >= drain -> break
		:: atomic { drained[id] < drain && MAYCHECK(ci) -> CHECKING(ci) };
			drain_check(pred);
			d_step { ans = 0; busy = 0; abort = 0; fdone = 0; asked3 = 0; rcv = 0; xtra = 0;
				 gah = 0; nfl = 0 };
			if
			:: clr -> clr = 0; break	/* only the dead owe: the slot is retired */
			:: else
			fi
		od;
		atomic { D_C = 0; D_R = 0; CHG }
	:: else
	fi
}

/* ---- exclusive release (x_release, lock_posted.c, lock_wait_successor) ---- */
/*
 * lock_grant_more: grant registrations until st (settled: granted, or found dead before
 * they registered) reaches lim. After a while (a periodic check) a census of the
 * releaser's rank may find the missing ones dead (missing_are_dead: complete, nothing
 * unplaced, no shared request waiting behind us that we have not collected): then they
 * count as settled. The op timeout may also end the wait while rank 3 is dead (the
 * release fails: its slot is lost).
 */
inline grant_wait(ci, lim) {
	nchk = 0;
	do
	GRANTS(st < lim)
	:: st >= lim -> break	/* (at once if nothing is missing) */
	:: atomic { st < lim && MAYCHECK(ci) -> CHECKING(ci) };
		census(r);
		if
		:: st < lim && !abort && !flgU && !wsh ->
#ifndef BUG_LATE_REG
			/* collect once more after the census (the dead can no longer write:
			 * the census taker declared them), so that an entry of a
			 * dead request that registered after the last collect is not counted
			 * twice (missing now, granted by a later lock_grant_ready) */
			d_step {
				k = 0;
				do
				:: k < KMAX ->
					if
					:: (gm & (1 << k)) == 0 && E(id, k) != 0 ->
						GIVE(E(id, k)); E(id, k) = 0; gm = gm | (1 << k); st++
					:: else
					fi;
					k++
				:: else -> break
				od;
				k = 0; CHG };
			if :: st < lim -> st = lim :: else fi
#else
			st = lim
#endif
		:: else
		fi;
		d_step { ans = 0; abort = 0; flgS = 0; flgU = 0; rep = 0; alive = 0; wsh = 0 };
		if
		:: st >= lim -> break	/* returns: what registered meanwhile stays */
		:: else
		fi
	:: st < lim && dead3 -> goto relfail
	od
}

inline xrelease(ci, mayp) {
	atomic { nx[r]--; CHG };
	gm = 0; st = 0; ok = 0; x = 0; q = 0;
	if
	:: nxt[id] == 0 ->
		/* x: the shared requests counted behind us that we know of */
		do
		::
			/* lock_grant_ready: grant those registered */
			do
			GRANTS(1)
			:: else -> break
			od;
			if :: x < st -> x = st :: else fi;
#ifndef BUG_IDLE_SURVEY
			/* lock_grant_more: every request counted so far is granted (or found dead)
			 * before the CAS can leave the word idle */
			grant_wait(ci, x);
			if :: x < st -> x = st :: else fi;
#endif
			atomic {
				/* the first CAS for [me | 0] is posted: the census no longer reports us */
				if
				:: mayp && x == 0 -> posted[id] = 1
				:: else
				fi;
				if
				:: W_T == id && W_S == x -> W_T = 0; ok = 1
				:: else -> vT = W_T; x = W_S; ok = 0;
					/* ghost: settled never exceeds the count in the word, or
					 * the CAS [me | settled] can never succeed (a livelock) */
					assert(vT != id || st <= x)
				fi;
				CHG };
			if
			:: ok || vT != id -> break
			:: else
			fi
		od;
		if
		:: ok -> s = x
		:: else ->
			/* transient: the successor swapped in; wait for it to announce */
			nchk = 0;
			do
			:: nxt[id] != 0 -> break
			:: atomic { nxt[id] == 0 && MAYCHECK(ci) -> CHECKING(ci) };
				census(r);
				if
				:: nxt[id] == 0 && !abort && !flgU && !alive -> goto relfail
				:: else
				fi;
				d_step { ans = 0; abort = 0; flgS = 0; flgU = 0; rep = 0; alive = 0; wsh = 0 }
			od;
			q = nxt[id]; s = next_s[id];
			/* x_release: "successor counts %u shared requests, %u already granted" */
			assert(s >= st)
		fi
	:: else ->
		q = nxt[id]; s = next_s[id]
	fi;
	/* grant my s shared requests not settled yet, waiting for them to register (with
	 * the fix, after a CAS to idle none is left; -DBUG_IDLE_SURVEY grants them now) */
	grant_wait(ci, s);
	/* x_release: "%u shared waiters registered behind us, our successor counts %u" */
	assert(st <= s);
	atomic {
		if
		:: q != 0 -> GIVE(q)
		:: else
		fi;
		qs[id] = 0; posted[id] = 0; CHG };
	goto reldone;
relfail:	/* the release failed: the slot is lost (its hold is given up) */
	atomic { lost[id] = 1; qs[id] = 0; posted[id] = 0; CHG };
reldone:
	skip
}

#define X_ENTER(r) atomic { \
	assert(XFREE(1) && XFREE(2) && XFREE(3)); \
	D_FREE; \
	nx[r]++; CHG }

proctype Cl(byte ci; byte r; byte base; byte natt; byte modes) {
	byte id, att, pred, s, drain, k, x, vT, gm, st, q, oldC, ans, nchk;
	byte fdone, rcv, xtra, nfl;
	short rep, gah;
	bit excl, ok, clr, abort, busy, asked3, alive, flgS, flgU, wsh;

	{
	if
	:: (modes & 1) -> excl = 1
	:: (modes & 2) -> excl = 0
	fi;
attempt:
	id = base + att;
	if
	:: excl -> goto xacq
	:: else -> goto sacq
	fi;

xacq:
	/* 1. clear my record; surveys count me from before my first atomic */
	atomic { nxt[id] = 0; next_s[id] = 0; grant[id] = 0; qsh[id] = 0; qs[id] = QC; CHG };
	/* 3. swap myself in (the CAS loop's successful CAS) */
	atomic { pred = W_T; s = W_S; W_T = id; W_S = 0; qs[id] = QD; qpred[id] = pred; CHG };
	if
	:: pred != 0 ->
		/* 5. announce (next_s, then next), wait for the grant */
		atomic { next_s[pred] = s; nxt[pred] = id; CHG };
		do
		:: grant[id] -> break
		LAND
		:: !grant[id] && (lost[pred] || (RK(pred) == 3 && DECLV(r))) -> goto failed
		od
	:: else
	fi;
	/* 6. drain */
	xdrain(ci);
	/* 7. hold */
	X_ENTER(r);
	xrelease(ci, 1);
	goto done;

sacq:
	atomic { grant[id] = 0; qsh[id] = 1; qs[id] = QC; CHG };
	atomic { vT = W_T; k = W_S; W_S++; assert(W_S <= SMAX); qs[id] = QD; qpred[id] = vT; CHG };
	if
	:: vT != 0 ->
		atomic { assert(k < KMAX && E(vT, k) == 0); E(vT, k) = id; CHG };
		do
		:: grant[id] -> break
		LAND
		:: !grant[id] && (lost[vT] || (RK(vT) == 3 && DECLV(r))) -> goto failed
		od
	:: else
	fi;
	k = 0;
	/* hold (a shared hold frees its slot) */
	atomic { assert(SFREE(1) && SFREE(2) && SFREE(3)); shold[r]++; qs[id] = 0; CHG };
	/* release: FA(D, 1); from the hold's drop until its note is sent it is "under way"
	 * for surveys (dropping the hold and the FA are one step here: a survey in between
	 * would answer busy all the same) */
	atomic { shold[r]--; srel[r]++; oldC = D_C; D_R++; assert(D_R <= SMAX); CHG };
	atomic { if :: oldC != 0 -> drained[oldC]++ :: else fi; srel[r]--; oldC = 0; CHG };
	goto done;

failed:
	/* -EHOSTDOWN: the slot is lost (FAIL to whoever queued behind it); requeue */
	atomic { lost[id] = 1; qs[id] = 0; CHG };
	att++;
	if
	:: att >= natt -> goto gaveup_l
	:: else
	fi;
	/* RECOVER: the home starts an agent, or answers at once if its agent is in */
	atomic {
		if
		:: job == 2 -> ok = 1
		:: job == 1 -> ok = 0
		:: job == 0 && nag < NAG -> job = 1; nag++; ok = 0; CHG
		:: job == 0 && nag >= NAG -> goto gaveup_l	/* model bound */
		fi };
	if
	:: !ok -> job != 1
	:: else
	fi;
	ok = 0; pred = 0; s = 0; k = 0;
	goto attempt;
gaveup_l:
	gaveup++;
done:
	skip
	} unless { r == 3 && dead3 };
	d_step {
		id = 0; att = 0; pred = 0; s = 0; drain = 0; k = 0; x = 0; vT = 0; gm = 0; st = 0; q = 0;
		oldC = 0; ans = 0; nchk = 0; rep = 0; excl = 0; ok = 0; clr = 0; abort = 0; busy = 0; fdone = 0;
		asked3 = 0; alive = 0; flgS = 0; flgU = 0; wsh = 0; rcv = 0; xtra = 0; nfl = 0; gah = 0;
		ndone++ }
}

active proctype Agent() {
	byte id, att, pred, s, drain, k, x, vT, gm, st, q, ans, cur, nchk;
	byte fdone, rcv, xtra, nfl;
	short rep, beh, gah;
	bit ok, clr, abort, busy, asked3, alive, flgS, flgU, took, rdfail, wsh;
	byte r = 1;

end_idle:
	do
	:: job == 1 ->
		id = 8 + att; att++; took = 0;
		atomic { nxt[id] = 0; next_s[id] = 0; grant[id] = 0; qsh[id] = 0; qs[id] = QC; CHG };
		/* swapped in: the askers are answered and queue again behind it */
		atomic { pred = W_T; s = W_S; W_T = id; W_S = 0; qs[id] = QD; qpred[id] = pred;
			 job = 2; CHG };
		if
		:: pred != 0 ->
			atomic { next_s[pred] = s; nxt[pred] = id; CHG };
			/* lock_agent_wait_grant: the grant, or no live request ahead */
			nchk = 0;
			do
			:: grant[id] -> break
			LAND
			:: atomic { !grant[id] && MAYCHECK(3) -> CHECKING(3) };
				census(1);
				/* read_behind: the queue behind the agent, from the records */
				d_step {
					beh = BIT(id); cur = id; rdfail = 0;
					do
					:: cur != 0 && RK(cur) == 3 && dead3 ->
#ifdef BUG_CHAIN_DEAD
						rdfail = 1;	/* the read fails: cannot tell */
#endif
						break
					:: cur != 0 && !(RK(cur) == 3 && dead3) ->
						k = 0;
						do
						:: k < KMAX ->
							if
							:: E(cur, k) != 0 -> beh = beh | BIT(E(cur, k))
							:: else
							fi;
							k++
						:: else -> break
						od;
						cur = nxt[cur];
						if
						:: cur != 0 ->
							assert((beh & BIT(cur)) == 0);	/* -ELOOP */
							beh = beh | BIT(cur)
						:: else
						fi
					:: else -> break
					od;
					k = 0; cur = 0
				};
				if
				:: !abort && !flgS && !flgU && !rdfail && (rep & ~beh) == 0 -> took = 1
				:: else
				fi;
				d_step { ans = 0; abort = 0; flgS = 0; flgU = 0; rep = 0; alive = 0; beh = 0;
					 rdfail = 0; wsh = 0 };
				if
				:: took -> break
				:: else
				fi
			od
		:: else
		fi;
#ifndef BUG_AGENT_STALE_D
		if
		:: took ->
			/* nothing live ahead: the words are the agent's; D may hold a dead closer
			 * or a dead epoch's count */
			atomic { D_C = 0; D_R = 0; CHG }
		:: else -> xdrain(3)
		fi;
#else
		xdrain(3);
#endif
		X_ENTER(r);
		xrelease(3, 0);
		atomic { job = 0; ok = 0; nchk = 0; pred = 0; s = 0; drain = 0; x = 0; vT = 0; gm = 0;
			 st = 0; q = 0; rep = 0; beh = 0; took = 0; CHG }
	od
}

active proctype Killer() {
	bit deliver;

	if
	:: skip
#ifndef NODEATH
	:: atomic { dead3 = 1; CHG }
#endif
	fi;
	if
	:: dead3 ->
		do
		:: !declH ->
			/* the home declares rank 3 dead (its atomics are refused from now on);
			 * grants in flight to the agent land first, or never */
			if :: deliver = 1 :: deliver = 0 fi;
			d_step {
				declH = 1;
				if :: gpend[8] -> gpend[8] = 0; grant[8] = deliver :: else fi;
				if :: gpend[9] -> gpend[9] = 0; grant[9] = deliver :: else fi;
				deliver = 0;
				CHG }
		:: !decl2 ->
			/* rank 2 declares rank 3 dead: grants in flight to it land first (a
			 * killed process's socket) or never (a cut-off link) */
			if :: deliver = 1 :: deliver = 0 fi;
			d_step {
				decl2 = 1;
				if :: gpend[1] -> gpend[1] = 0; grant[1] = deliver :: else fi;
				if :: gpend[2] -> gpend[2] = 0; grant[2] = deliver :: else fi;
				if :: gpend[3] -> gpend[3] = 0; grant[3] = deliver :: else fi;
				deliver = 0;
				CHG }
		:: declH && decl2 -> break
		od
	:: else
	fi
}

#ifdef NUDGE
/* A RECOVER that no failure of this run caused (a try-lock's nudge, lock_agent_nudge, or
 * ddss_lock_test_recover): the home may run an agent at any time, also before the death. */
active proctype Nudger() {
	if
	:: atomic { job == 0 && nag < NAG -> job = 1; nag++; CHG }
	:: skip
	fi
}
#endif

init {
	atomic {
#ifndef NO_RANK2
		run Cl(0, 2, 1, NATT, M2);
#else
		ndone = 1;	/* a witness needing only rank 3's threads */
#endif
		run Cl(1, 3, 4, 2, M3A);
		run Cl(2, 3, 6, 2, M3B)
	}
	/* every client ended (granted and released, or failed); no agent at work */
	ndone == 3 && job == 0;
	/* the next closer must find D clean: otherwise it logs the -EPROTO of x_acquire */
	assert(W_T != 0 || (D_C == 0 && D_R <= W_S))
}
