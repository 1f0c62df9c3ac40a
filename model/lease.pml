/*
 * lease.pml: sqlease's lease, acting gate and fencing, for the spin model
 * checker. README.md beside this file maps every step to the Go code.
 *
 * Time is discrete: one tick of `now` is one second. `now` is the database's
 * clock and the only clock: local monotonic clocks run at the same rate
 * (rate drift is what SafetyMargin covers; offsets do not matter, the code
 * only subtracts local readings from each other).
 *
 * Faults: any node may pause (SIGSTOP, GC, VM pause, a stalled connection)
 * for any number of ticks, crash, or shut down; its requests already sent
 * are still applied by the database, at any later time. A node that is not
 * paused takes its steps without delay. With -DSESSION_LOSS the database
 * may also end the session of a live node (a restart, a killed backend).
 *
 * Switches: -DADVISORY (advisory mode: a session lock), -DSESSION_LOSS,
 * -DNO_RELEASE (no graceful shutdown), -DSTRICT_G1 (the strict G1 also
 * with session loss: SPEC §3's window, refuted),
 * the reachability probes
 * -DREACH_… (each asserts that an interesting step never happens, so that
 * spin must refute it: the checks above are not vacuous),
 * and the planted defects -DBUG_RECEIVE_TIME, -DBUG_NO_FENCE,
 * -DBUG_EARLY_RETRY, -DBUG_LOCK_ONLY, -DBUG_F2_RELEASE (the release that
 * finding F2 showed wrong, since fixed), -DBUG_F1_TAKEOVER (the takeover
 * that finding F1 showed wrong, since fixed: it deposed a live term
 * acquired without the lock).
 */

/* ---- Constants: the election package's defaults, 1 tick = 1 s ---- */
#define LEASE    6   /* DefaultLeaseDuration = 6s */
#define RENEW    2   /* DefaultRenewInterval = 2s */
#define ACQUIRE  1   /* DefaultAcquireInterval = 1s (jitter left out) */
#define MARGIN   1   /* SafetyMargin default = LeaseDuration/6 = 1s */
#define ADVGATE  (2*RENEW) /* advisory gate: heartbeats 2 RenewIntervals late */
#define ADVPOLL  10  /* advisoryWait: at most 10 AcquireIntervals */
#ifndef BOUND
#define BOUND    (LEASE + ACQUIRE) /* G5: failover within lease + acquire */
#endif
#ifndef OVERLAP
#if defined(ADVISORY) && defined(SESSION_LOSS) && !defined(STRICT_G1)
#define OVERLAP  ADVGATE /* a session lost while its node lives: the deposed gate closes within 2 RenewIntervals */
#else
#define OVERLAP  0
#endif
#endif

#ifndef N
#define N 2          /* nodes */
#endif
#ifndef HORIZON
#define HORIZON 13   /* ticks explored */
#endif
#ifndef MAXPAUSE
#define MAXPAUSE 1   /* pauses in one run */
#endif
#ifndef MAXCRASH
#define MAXCRASH 1   /* crashes and graceful shutdowns in one run */
#endif

/* ---- The database ---- */
byte now;            /* database time */
byte holder;         /* lease row: holding node + 1, 0 = no row */
byte epoch;          /* lease row: lease_epoch, the fencing token */
byte expires;        /* lease row: expires_at; expired when expires <= now */
byte lockOwner;      /* advisory: node + 1 whose session holds the lock, 0 = free */
bool rowLocked;      /* lease row: lease_locked, the term was taken or renewed through the lock */
byte occEpoch;       /* the occurrence: epoch of its last started attempt, 0 = none */
bool occDone;        /* the occurrence completed */

/* ---- The nodes ---- */
mtype = { FOLLOW, ACQ_SENT, ACQ_DONE, TAKE_SENT, TAKE_DONE, LEAD, REN_SENT, REN_DONE };
mtype ph[N];         /* where the node's election loop is */
byte tok[N];         /* epoch of the current term, 0 = gate closed (closeGate) */
byte sentAt[N];      /* local time the pending acquire/renew/takeover was sent */
byte trusted[N];     /* trustedUntil: leadership ends */
byte gate[N];        /* gateUntil: the gate is open until then (<= trusted) */
byte wake[N];        /* next poll (follower) or renew (leader) */
byte settled[N];     /* PriorTermsEnd of the current term */
byte res[N];         /* its response: the epoch acquired, 1 = renewed, 0 = refused */
bool viaLock[N];     /* the term renews through its locked session (a takeover) */
bool lockWait[N];    /* advisory: a Lock call is waiting */
bool locked[N];      /* advisory: this node's session was granted the lock */
byte tkWake[N];      /* advisory: a refused takeover is tried again from then (or on expiry) */
byte wr[N];          /* fenced write in flight: 0 none, 1 start attempt, 2 finish */
byte wrEp[N];        /* its epoch */
byte wres[N];        /* its outcome: 0 pending, 1 committed, 2 fence failed */
byte sending[N];     /* epoch of the attempt this node is sending, 0 = none */
bool paused[N];
bool dead[N];

byte pauses, crashes, sessionLosses;
byte noActor;        /* ticks without a live actor since the lease last moved */
byte overlap;        /* ticks during which two gates have been open */
byte lastCommit;     /* epoch of the last committed fenced write */

#define isLive(i)  (!dead[i] && !paused[i])
/* Require/Ensure: the gate is open at this instant. */
#define acts(i)    (tok[i] != 0 && now < gate[i] && !dead[i])
/* An attempt's sender may still be sending until its leading context is
 * cancelled: at its local deadline at the latest. */
#define mayStillSend(k, e) (sending[k] != 0 && sending[k] < e && !dead[k] && now < trusted[k])

/* G1, checked where a gate opens or is extended (a tick only closes
 * gates): no other node's gate is open. When the database ends the session
 * of a live node (SESSION_LOSS), a takeover through the lock deposes a term
 * whose gate is open (SPEC §3): there the clock bounds the overlap instead,
 * and -DSTRICT_G1 asks for the strict property. */
inline g1(i) {
#if !(defined(ADVISORY) && defined(SESSION_LOSS)) || defined(STRICT_G1)
	j = 0;
	do
	:: j < N -> assert(j == i || !acts(j)); j++
	:: else -> j = 0; break
	od
#else
	skip
#endif
}

/* The lease row moved on (acquire, renew, takeover): the bounded-failover
 * clock restarts. */
inline moved() { noActor = 0 }

/* deadlines (elector.go): trust the lease from the request's SEND time:
 * the database set expires = (its now, later) + LEASE. */
inline trust(i) {
#ifdef BUG_RECEIVE_TIME
	trusted[i] = now + LEASE - MARGIN;
#else
	trusted[i] = sentAt[i] + LEASE - MARGIN;
#endif
	gate[i] = trusted[i];
#ifdef ADVISORY
	if
	:: sentAt[i] + ADVGATE < gate[i] -> gate[i] = sentAt[i] + ADVGATE
	:: else
	fi
#else
	skip
#endif
}

/* lead (elector.go): a new term; its gate is open at once unless the
 * deadline has passed already. */
inline startLead(i, ep, prior) {
	tok[i] = ep;
	trust(i);
	settled[i] = prior;
	wake[i] = now + RENEW;
	sentAt[i] = 0; res[i] = 0;
	ph[i] = LEAD;
	if :: now < trusted[i] -> g1(i) :: else fi
}

/* closeGate + the lead loop's return (drop, resign); in advisory mode
 * runAdvisory then closes the session and opens a new one. */
inline endTerm(i) {
	tok[i] = 0; trusted[i] = 0; gate[i] = 0; settled[i] = 0;
	viaLock[i] = 0; sending[i] = 0; sentAt[i] = 0; res[i] = 0;
	ph[i] = FOLLOW; wake[i] = now;
#ifdef ADVISORY
	if :: lockOwner == i + 1 -> lockOwner = 0 :: else fi;
	locked[i] = 0; lockWait[i] = 1; tkWake[i] = 0;
#endif
}

proctype Node(byte i) {
	byte j;
end:	do
	/* ---- follower: tryAcquire / awaitLead ---- */
	:: atomic { isLive(i) && ph[i] == FOLLOW && now >= wake[i] ->
#ifdef ADVISORY
		lockWait[i] = lockWait[i] || !locked[i]; /* re-open a lost session */
		/* Acquire an expired lease only once it has been expired for
		 * AcquireInterval (the grace leaves it to the lock's winner). */
		if
#ifndef BUG_LOCK_ONLY
		:: holder != 0 && expires + ACQUIRE <= now -> sentAt[i] = now; ph[i] = ACQ_SENT
#endif
		:: holder == 0 -> wake[i] = now + ACQUIRE
		:: holder != 0 && expires > now ->
			if
			:: expires - now < ADVPOLL -> wake[i] = expires
			:: else -> wake[i] = now + ADVPOLL
			fi
		:: holder != 0 && expires <= now && expires + ACQUIRE > now -> wake[i] = expires + ACQUIRE
#ifdef BUG_LOCK_ONLY
		:: holder != 0 && expires + ACQUIRE <= now -> wake[i] = now + ACQUIRE
#endif
		fi
#else
		if
		:: holder == 0 || expires <= now -> sentAt[i] = now; ph[i] = ACQ_SENT
		:: else -> /* followWait: poll when the lease is due, at least every AcquireInterval */
			if
			:: expires - now < ACQUIRE -> wake[i] = expires
			:: else -> wake[i] = now + ACQUIRE
			fi
		fi
#endif
	}
	/* database: Acquire, one conditional statement */
	:: atomic { ph[i] == ACQ_SENT ->
		if
		:: holder == 0 || expires <= now ->
			epoch++; holder = i + 1; expires = now + LEASE; res[i] = epoch; moved();
			rowLocked = 0
		:: else -> res[i] = 0
		fi;
		ph[i] = ACQ_DONE
	}
	:: atomic { isLive(i) && ph[i] == ACQ_DONE ->
		if
		:: res[i] != 0 -> startLead(i, res[i], 0)
		:: else -> ph[i] = FOLLOW; wake[i] = now + ACQUIRE; sentAt[i] = 0
		fi
	}
#ifdef ADVISORY
	/* database: a waiting Lock is granted the free lock */
	:: atomic { lockOwner == 0 && lockWait[i] && !dead[i] ->
		lockOwner = i + 1; lockWait[i] = 0; locked[i] = 1
	}
	/* awaitLead: the lock is ours; leadLocked: takeover (again once a
	 * refused takeover's lease is due, or has expired or been released) */
	:: atomic { isLive(i) && ph[i] == FOLLOW && locked[i] && lockOwner == i + 1 &&
	            (now >= tkWake[i] || expires <= now) ->
		sentAt[i] = now; ph[i] = TAKE_SENT
	}
	/* database: Takeover through the locked session, of a missing or
	 * expired lease or of a term taken through the lock; a live term
	 * acquired without it is left to expire (the fix of finding F1) */
	:: atomic { ph[i] == TAKE_SENT ->
		if
#ifdef BUG_F1_TAKEOVER
		:: lockOwner == i + 1 ->
#else
		:: lockOwner == i + 1 && (holder == 0 || expires <= now || rowLocked) ->
#endif
#ifdef REACH_DEPOSE
			assert(holder == 0 || expires <= now); /* probe: no unexpired lease is taken over */
#endif
			epoch++; holder = i + 1; expires = now + LEASE; res[i] = epoch; moved();
			rowLocked = 1
#ifndef BUG_F1_TAKEOVER
		:: lockOwner == i + 1 && holder != 0 && expires > now && !rowLocked -> res[i] = 255 /* ErrLeaseHeld */
#endif
		:: lockOwner != i + 1 -> res[i] = 0 /* ErrSessionLost */
		fi;
		ph[i] = TAKE_DONE
	}
	:: atomic { isLive(i) && ph[i] == TAKE_DONE ->
		if
		:: res[i] == 255 -> /* keep the lock, read the lease, wait until it is due */
			ph[i] = FOLLOW; tkWake[i] = expires; sentAt[i] = 0; res[i] = 0
		:: res[i] != 0 && res[i] != 255 ->
			viaLock[i] = 1;
			/* PriorTermsEnd: the taken-over lease runs out within its
			 * duration of now (priorTTL). */
#ifdef BUG_EARLY_RETRY
			startLead(i, res[i], 0)
#else
			startLead(i, res[i], now + LEASE)
#endif
		:: else -> endTerm(i); wake[i] = now + ACQUIRE /* advisoryFailed */
		fi
	}
	/* lead: the session lock is lost (lock.Lost) */
	:: atomic { isLive(i) && locked[i] && lockOwner != i + 1 && (ph[i] == LEAD || ph[i] == FOLLOW) ->
		if
		:: ph[i] == LEAD -> endTerm(i)
		:: else -> locked[i] = 0; tkWake[i] = 0
		fi
	}
#endif
	/* ---- leader: lead ---- */
	/* the local deadline passed without a renew, or a failed fence closed
	 * the gate: drop */
	:: atomic { isLive(i) && ph[i] == LEAD && (tok[i] == 0 || now >= trusted[i]) -> endTerm(i) }
	:: atomic { isLive(i) && ph[i] == LEAD && tok[i] != 0 && now >= wake[i] && now < trusted[i] ->
		/* leadUnlocked: once its Lock is won, a term acquired without
		 * the lock renews through the locked session */
		viaLock[i] = viaLock[i] || locked[i];
		sentAt[i] = now; ph[i] = REN_SENT
	}
	/* database: Renew (through the session in a locked term) */
	:: atomic { ph[i] == REN_SENT ->
		if
		:: holder == i + 1 && epoch == tok[i] && expires > now && (!viaLock[i] || lockOwner == i + 1) ->
			expires = now + LEASE; res[i] = 1; moved();
			if :: viaLock[i] -> rowLocked = 1 :: else fi
		:: else -> res[i] = 0
		fi;
		ph[i] = REN_DONE
	}
	:: atomic { isLive(i) && ph[i] == REN_DONE ->
		if
		:: res[i] == 1 && tok[i] != 0 && now < trusted[i] ->
			trust(i);
			wake[i] = now + RENEW; sentAt[i] = 0; res[i] = 0; ph[i] = LEAD;
			g1(i)
		:: else -> endTerm(i) /* renew failed or came back after the deadline */
		fi
	}
#ifndef NO_RELEASE
	/* graceful shutdown: close the gate, wait for the callback (it is
	 * not sending), release the session lock and the lease, exit */
	:: atomic { isLive(i) && ph[i] == LEAD && tok[i] != 0 && sending[i] == 0 && wr[i] == 0 && crashes < MAXCRASH ->
		crashes++;
		if
#ifndef BUG_F2_RELEASE
		/* the fix of finding F2 (README; leadLocked's release): while an
		 * earlier term may still be acting, leave the row to expire
		 * instead of releasing it */
		:: holder == i + 1 && epoch == tok[i] && expires > now && now >= settled[i] -> expires = now
#else
		/* planted defect: the release before the fix */
		:: holder == i + 1 && epoch == tok[i] && expires > now -> expires = now
#endif
		:: else
		fi;
		if :: lockOwner == i + 1 -> lockOwner = 0 :: else fi;
		tok[i] = 0; dead[i] = 1; lockWait[i] = 0; locked[i] = 0
	}
#endif

	/* ---- the scheduler: one occurrence, its attempts, fenced writes ---- */
	/* start an attempt: a new occurrence, or retry one an earlier term
	 * interrupted, not before PriorTermsEnd */
	:: atomic { isLive(i) && acts(i) && wr[i] == 0 && sending[i] == 0 && !occDone &&
	            (occEpoch == 0 || (occEpoch < tok[i] && now >= settled[i])) ->
		wr[i] = 1; wrEp[i] = tok[i]
	}
	/* the send is done: record the outcome (Ensure, then a fenced write) */
	:: atomic { isLive(i) && acts(i) && wr[i] == 0 && sending[i] == tok[i] && sending[i] != 0 ->
		wr[i] = 2; wrEp[i] = tok[i]; sending[i] = 0
	}
	/* database: the fenced transaction (sqlstore.Store.Fenced) */
	:: atomic { wr[i] != 0 && wres[i] == 0 ->
		if
#ifdef BUG_NO_FENCE
		:: true ->
#else
		:: holder == i + 1 && epoch == wrEp[i] && expires > now ->
#endif
			assert(wrEp[i] == epoch);        /* G2: no stale epoch commits */
			assert(wrEp[i] >= lastCommit);   /* committed epochs never go back */
			lastCommit = wrEp[i];
			if
			:: wr[i] == 1 ->
				/* an interrupted occurrence is retried only when its
				 * deposed sender can no longer be sending */
				j = 0;
				do
				:: j < N -> assert(!mayStillSend(j, wrEp[i])); j++
				:: else -> j = 0; break
				od;
#ifdef REACH_RETRY
				assert(occEpoch == 0);     /* probe: no retry ever commits */
#endif
#ifdef REACH_DEFERRED_RETRY
				assert(occEpoch == 0 || settled[i] == 0); /* probe: no deferred retry */
#endif
				occEpoch = wrEp[i]
			:: else -> occDone = 1
			fi;
			wres[i] = 1
		:: else -> wres[i] = 2; /* ErrFenceFailed */
#ifdef REACH_FENCE_FAIL
			assert(false) /* probe: no fence ever fails */
#else
			skip
#endif
		fi
	}
	:: atomic { isLive(i) && wres[i] != 0 ->
		if
		:: wres[i] == 1 && wr[i] == 1 && acts(i) && tok[i] == wrEp[i] -> sending[i] = wrEp[i]
		:: wres[i] == 2 && tok[i] == wrEp[i] -> tok[i] = 0 /* Elector.Fenced closes the gate */
		:: else
		fi;
		wr[i] = 0; wrEp[i] = 0; wres[i] = 0
	}
	od
}

/* Faults, each at any instant. */
active proctype Env() {
	byte i;
end:	do
	:: atomic { pauses < MAXPAUSE -> select(i : 0 .. N-1); if :: isLive(i) -> paused[i] = 1; pauses++ :: else fi; i = 0 }
	:: atomic { (paused[0] || paused[1] || (N > 2 && paused[N-1])) ->
		select(i : 0 .. N-1); if :: paused[i] -> paused[i] = 0 :: else fi; i = 0 }
	:: atomic { crashes < MAXCRASH -> select(i : 0 .. N-1);
		if
		:: !dead[i] -> dead[i] = 1; crashes++; sending[i] = 0; tok[i] = 0; paused[i] = 0;
			/* the database sees the session die */
			if :: lockOwner == i + 1 -> lockOwner = 0 :: else fi;
			lockWait[i] = 0; locked[i] = 0
		:: else
		fi; i = 0 }
#ifdef SESSION_LOSS
	:: atomic { sessionLosses < 1 -> select(i : 0 .. N-1);
		if
		:: !dead[i] -> sessionLosses++;
			if :: lockOwner == i + 1 -> lockOwner = 0 :: else fi;
			lockWait[i] = 0 /* a waiting Lock fails; locked[i] stays until noticed */
		:: else
		fi; i = 0 }
#endif
	od
}

/* A node blocks the clock while it has a step to take now. */
#define idle(i) (dead[i] || paused[i] || \
	((ph[i] == FOLLOW || ph[i] == LEAD) && now < wake[i] && wres[i] == 0 && wr[i] == 0 && \
	 !(ph[i] == LEAD && (tok[i] == 0 || now >= trusted[i])) && \
	 !(locked[i] && lockOwner != i + 1) && \
	 !(ph[i] == FOLLOW && locked[i] && (now >= tkWake[i] || expires <= now))))
#define lockIdle (lockOwner != 0 || !(lockWait[0] && !dead[0]) && !(lockWait[1] && !dead[1]) && (N < 3 || !(lockWait[2] && !dead[2])))

active proctype Clock() {
	byte i;
	bool live, othersOK;
	byte acting, actors;
end:	do
	:: atomic { now < HORIZON && idle(0) && idle(1) && (N < 3 || idle(2)) && lockIdle ->
		/* Bounded failover (G5): while every node but the lease's holder
		 * is live, some live node acts within BOUND ticks of the lease
		 * last moving. */
		live = 0; acting = 0; actors = 0; othersOK = 1; i = 0;
		do
		:: i < N ->
			live = live || isLive(i);
			acting = acting || (isLive(i) && acts(i));
			actors = actors + acts(i);
			othersOK = othersOK && (i + 1 == holder || isLive(i));
			i++
		:: else -> break
		od;
		if
		:: live && othersOK && !acting -> noActor++
		:: else -> noActor = 0
		fi;
		assert(noActor <= BOUND);
		/* G1: two gates open at once only for OVERLAP ticks (none in
		 * lease mode) */
		if
		:: actors > 1 -> overlap++
		:: else -> overlap = 0
		fi;
		assert(overlap <= OVERLAP);
		now++;
		i = 0; live = 0; acting = 0; actors = 0; othersOK = 0
	}
	:: timeout -> assert(now == HORIZON); break /* nothing stuck before the horizon */
	od
}

init {
	byte i;
	atomic {
		i = 0;
		do
		:: i < N -> ph[i] = FOLLOW;
#ifdef ADVISORY
			lockWait[i] = 1;
#endif
			run Node(i); i++
		:: else -> break
		od
	}
}
