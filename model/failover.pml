/*
 * failover.pml: sqlease's lease across a failover of the database to an
 * asynchronous replica that lacks the primary's last writes (issue 31;
 * postgres/timeline.go), for the spin model checker. README.md beside this
 * file has the table of checks and results.
 *
 * Time is discrete (one tick of `now` is one second of database time, the
 * only clock, as in lease.pml). Two nodes acquire, renew and release one
 * lease. A request is applied by the database and answered within the tick
 * it is sent in, in any interleaving with the other node's steps and the
 * faults; a leader trusts its lease until sentAt + LEASE (the send time of
 * its last acquire or renew that succeeded; the safety margin covers clock
 * drift, which is not modelled).
 *
 * The database is a primary and an asynchronous replica. At any instant
 * the replica may copy the primary's state (replicate): so the replica
 * holds the state after some prefix of the primary's writes. Once, the
 * primary dies (kill): a request applied but not yet answered gets an
 * error instead of its answer, and requests sent meanwhile fail. Later
 * (any number of ticks), the replica is promoted (promote): it becomes the
 * primary, on timeline 2, with the state it had copied; every write after
 * that copy is lost, also the ones the old primary acknowledged.
 *
 * "Acting": a node's term acts from the moment its acquire's answer
 * arrives until its local deadline, also after it dropped the term on a
 * failed renew (a child process or a send in flight is stopped only by the
 * deadline: Elector.ActUntil), but only until its graceful release, which
 * closes the gate and waits for the callback before releasing.
 *
 * The fix (the default): epochs fold in the timeline (epoch = max(old + 1,
 * BASE(tl) + 1), BASE(tl) = (tl - 1) * TLSTEP, TLSTEP standing for 2^32);
 * a renew of a term of an older timeline fails; the first acquire on a new
 * timeline records when it saw it (the marker) and, until LEASE ticks
 * later, turns a row of an older timeline (or a missing row) into a
 * hold-off row owned by nobody, expiring at the end of the hold-off, and
 * reports the lease as held.
 *
 * Switches: -DBUG_NO_HOLDOFF (epochs folded, renews of older timelines
 * refused, but no hold-off: refuted by G1), -DBUG_PLAIN_COUNTER (the
 * epoch a plain counter, the timeline kept in a column of its own for the
 * hold-off and the renew check: refuted by G2), -DREACH_HOLDOFF,
 * -DHOLD=2 (a hold-off shorter than a lease: refuted by G1, so one lease
 * duration is needed), -DREACH_NEW_TERM (probes: a hold-off row is written; a term is granted on
 * the new timeline — each asserted never to happen, so spin must refute
 * them).
 */

#define LEASE   3    /* lease duration */
#define RENEW   1    /* renew interval */
#define ACQUIRE 1    /* a follower's poll */
#define TLSTEP  16   /* stands for 2^32: no timeline issues 16 epochs within the horizon */
#define BASE(t) (((t) - 1) * TLSTEP)
#define N       2    /* nodes */
#define NOBODY  (N + 1) /* the holder of a hold-off row */
#define ERR     255  /* a request that failed (no primary, connection cut) */
#ifndef HOLD
#define HOLD    LEASE /* the hold-off: one lease duration from the first sighting */
#endif
#ifndef HORIZON
#define HORIZON 12
#endif
#ifndef MAXREL
#define MAXREL  3    /* graceful releases in one run */
#endif

/* ---- the primary (after promotion: the promoted replica) ---- */
byte now;
byte tl = 1;         /* the primary's timeline */
byte holder;         /* node + 1, NOBODY, 0 = no row */
byte epoch;
byte expires;
byte rtl;            /* the timeline the row's term was written on: with
                        folding, a function of epoch (BUG_PLAIN_COUNTER keeps
                        it in a column of its own) */
byte mtl;            /* the marker: the newest timeline seen, 0 = none */
byte mend;           /* and the end of its hold-off */
/* ---- the replica's copy ---- */
byte cholder, cepoch, cexpires, crtl;
bool down;           /* the primary is dead, the replica not yet promoted */
bool failed;         /* the failover happened */
byte maxGranted;     /* ghost: the highest epoch ever granted, on any copy */

/* ---- the nodes ---- */
mtype = { FOLLOW, ACQ_SENT, ACQ_DONE, LEAD, REN_SENT, REN_DONE, REL_SENT };
mtype ph[N];
byte tok[N];         /* the term's epoch, 0 = none */
byte sentAt[N];
byte trusted[N];     /* the local deadline */
byte until[N];       /* acts while now < until */
byte wake[N];
byte res[N];         /* the answer: epoch acquired / 1 renewed, 0 refused, ERR */
byte relEp[N];       /* the epoch a release in flight names */
byte rels;

#define acts(j) (now < until[j])

inline g1(i) {
	j = 0;
	do
	:: j < N -> assert(j == i || !acts(j)); j++
	:: else -> j = 0; break
	od
}

proctype Node(byte i) {
	byte j;
	bool holding;
end:	do
	:: atomic { ph[i] == FOLLOW && now >= wake[i] -> sentAt[i] = now; ph[i] = ACQ_SENT }
	/* database: Acquire (postgres/timeline.go: leaseUpsert) */
	:: atomic { ph[i] == ACQ_SENT ->
		if
		:: down -> res[i] = ERR
		:: else ->
			holding = 0;
#ifndef BUG_NO_HOLDOFF
			if
			:: tl > 1 && mtl != tl -> mtl = tl; mend = now + HOLD; holding = 1
			:: tl > 1 && mtl == tl -> holding = (mend > now)
			:: else
			fi;
#endif
			if
			:: holding && (holder == 0 || rtl < tl) ->
				/* a hold-off row, owned by nobody */
#ifdef REACH_HOLDOFF
				assert(false);
#endif
				holder = NOBODY;
#ifndef BUG_PLAIN_COUNTER
				epoch = BASE(tl);
#endif
				rtl = tl;
				if :: expires < mend -> expires = mend :: else fi;
				res[i] = 0
			:: else ->
				if
				:: (holder == 0 || expires <= now) && (!holding || rtl >= tl) ->
#ifdef BUG_PLAIN_COUNTER
					epoch++;
#else
					if
					:: epoch + 1 > BASE(tl) + 1 -> epoch++
					:: else -> epoch = BASE(tl) + 1
					fi;
#endif
					/* G2: epochs never issued twice, never go back */
					assert(epoch > maxGranted);
					maxGranted = epoch;
#ifdef REACH_NEW_TERM
					assert(tl == 1);
#endif
					holder = i + 1; expires = now + LEASE; rtl = tl; res[i] = epoch
				:: else -> res[i] = 0
				fi
			fi
		fi;
		holding = 0;
		ph[i] = ACQ_DONE
	}
	:: atomic { ph[i] == ACQ_DONE ->
		if
		:: res[i] != 0 && res[i] != ERR ->
			tok[i] = res[i]; trusted[i] = sentAt[i] + LEASE; until[i] = trusted[i];
			wake[i] = now + RENEW; ph[i] = LEAD;
			g1(i)
		:: else -> ph[i] = FOLLOW; wake[i] = now + ACQUIRE
		fi;
		res[i] = 0; sentAt[i] = 0
	}
	/* the local deadline passed: drop */
	:: atomic { ph[i] == LEAD && now >= trusted[i] -> tok[i] = 0; ph[i] = FOLLOW; wake[i] = now }
	:: atomic { ph[i] == LEAD && now >= wake[i] && now < trusted[i] -> sentAt[i] = now; ph[i] = REN_SENT }
	/* database: Renew, only for a term of the current timeline */
	:: atomic { ph[i] == REN_SENT ->
		if
		:: down -> res[i] = ERR
		:: !down && holder == i + 1 && epoch == tok[i] && expires > now && rtl == tl ->
			expires = now + LEASE; res[i] = 1
		:: else -> res[i] = 0
		fi;
		ph[i] = REN_DONE
	}
	:: atomic { ph[i] == REN_DONE ->
		if
		:: res[i] == 1 && now < trusted[i] ->
			trusted[i] = sentAt[i] + LEASE; until[i] = trusted[i];
			wake[i] = now + RENEW; ph[i] = LEAD;
			g1(i)
		:: else -> /* dropped; a lost term may act until its deadline */
			tok[i] = 0; ph[i] = FOLLOW; wake[i] = now
		fi;
		res[i] = 0; sentAt[i] = 0
	}
	/* graceful release (Resign): the gate closes, the callback returns,
	 * then the release is sent */
	:: atomic { ph[i] == LEAD && rels < MAXREL ->
		rels++; relEp[i] = tok[i]; tok[i] = 0; until[i] = now; ph[i] = REL_SENT
	}
	:: atomic { ph[i] == REL_SENT ->
		if
		:: !down && holder == i + 1 && epoch == relEp[i] && expires > now -> expires = now
		:: else
		fi;
		relEp[i] = 0; ph[i] = FOLLOW; wake[i] = now + ACQUIRE
	}
	od
}

active proctype Env() {
	byte i;
end:	do
	/* the replica copies the primary: it holds a prefix of its writes */
	:: atomic { !down && !failed -> cholder = holder; cepoch = epoch; cexpires = expires; crtl = rtl }
	/* the primary dies: answers not yet received are lost */
	:: atomic { !down && !failed -> down = 1;
		i = 0;
		do
		:: i < N -> if :: ph[i] == ACQ_DONE || ph[i] == REN_DONE -> res[i] = ERR :: else fi; i++
		:: else -> i = 0; break
		od }
	/* the replica is promoted, on a new timeline */
	:: atomic { down -> holder = cholder; epoch = cepoch; expires = cexpires; rtl = crtl;
		tl = 2; down = 0; failed = 1 }
	od
}

#define busy(i) (ph[i] == ACQ_SENT || ph[i] == ACQ_DONE || ph[i] == REN_SENT || ph[i] == REN_DONE || ph[i] == REL_SENT || \
	(ph[i] == FOLLOW && now >= wake[i]) || (ph[i] == LEAD && (now >= wake[i] || now >= trusted[i])))

/* A tick; values that time has made irrelevant are zeroed, so that states
 * that differ only in them are one (a past deadline or expiry compares as
 * any other past instant). */
#define past(v) if :: v != 0 && v <= now -> v = 0 :: else fi

active proctype Clock() {
end:	do
	:: atomic { now < HORIZON && !busy(0) && !busy(1) -> now++;
		past(until[0]); past(until[1]); past(expires); past(cexpires); past(mend);
		if :: ph[0] != LEAD -> trusted[0] = 0 :: else fi;
		if :: ph[1] != LEAD -> trusted[1] = 0 :: else fi }
	:: timeout -> assert(now == HORIZON); break
	od
}

init {
	atomic {
		ph[0] = FOLLOW; ph[1] = FOLLOW; rtl = 1;
		run Node(0); run Node(1)
	}
}
