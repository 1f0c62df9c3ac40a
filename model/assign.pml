/*
 * assign.pml: singletons placed by node, fenced by generation (issue 32),
 * for the spin model checker. README.md beside this file has the table of
 * checks and results; lease.pml models one lease, this file the protocol
 * that places many singletons on the nodes' member leases.
 *
 * Time is discrete: one tick of `now` is one second of database time, the
 * only clock (local monotonic clocks run at its rate; the code subtracts
 * local readings only from each other).
 *
 * The database holds, per node, its member lease ("member:<holder>": epoch
 * lep, expiry lexp; renewed once per renew interval whatever the node runs)
 * and, for the singleton, its assignment row: the node it is assigned to
 * (anode), that node's lease epoch when it was assigned (anep) and the
 * generation (agen), which grows at every reassignment and is the
 * singleton's fencing token. A node's lease is live while lexp > now; the
 * assignment is valid while (anode, anep) names a live lease.
 *
 * A node (Node):
 *   - acquires its member lease (a new epoch) when it has none, renews it
 *     every RENEW ticks, and trusts it until sentAt + LEASE - MARGIN,
 *     sentAt being the acquire's or renew's send time; at that local
 *     deadline, or when a renew fails, it stops its bodies and forgets its
 *     assignments (they belong to the ended term);
 *   - places: one statement that, only while its own lease is live with
 *     its epoch, assigns to it the singleton when it is unassigned or its
 *     node's lease is not live (generation + 1), and returns the
 *     assignment if it is this node's under this epoch, and the expiry of
 *     the lease of the node holding it otherwise (the node places again
 *     then, or after RENEW ticks);
 *   - starts the body under the generation it read, while its deadline has
 *     not passed; the body acts until that deadline (moved on by renews);
 *   - saves: one statement, fenced by the generation and by the node's
 *     lease being live in database time with the epoch the assignment
 *     names;
 *   - gives the singleton to another node (rebalancing, a joining node):
 *     the body stops first, then one statement moves the assignment to the
 *     other node's live lease (generation + 1), only while this node's
 *     assignment and lease are current.
 *
 * Faults: a node may pause (SIGSTOP, a stalled connection) for any number
 * of ticks and crash (kill -9); requests it sent are applied by the database at
 * any later time, also while it is paused or after it crashed. A node that
 * is not paused takes its steps without delay.
 *
 * Properties:
 *   - G1 for singletons: at most one node runs the body at any instant
 *     (asserted wherever a body starts or a deadline moves on);
 *   - the generation never goes back, and a committed save's generation is
 *     the current one and never below an earlier save's;
 *   - G2 for saves: a save commits only while its node's lease is live in
 *     database time under the epoch its assignment names;
 *   - bounded failover: while every node other than the one the singleton
 *     is assigned to is live, some live node runs it within BOUND ticks
 *     of the assignment last moving or its node's lease last being renewed
 *     (as lease.pml's G5);
 *   - a handover is short: after a give, the receiving node runs the
 *     singleton within RENEW ticks while it is live;
 *   - nothing gets stuck before the horizon.
 *
 * Planted defects: -DBUG_GEN_ONLY (a save checked against the generation
 * only: refuted by G2 for saves), -DBUG_DEAD_LIVE (placement counts a node
 * with a lease row as live, expired or not: a dead node keeps its
 * singleton, refuted by bounded failover), -DBUG_KEEP (a node keeps its
 * assignments across the end of its lease term: refuted by G1),
 * -DBUG_NO_STOP (a give does not wait for the body to stop: refuted by
 * G1). Probes -DREACH_…: a reassignment away from a node, a give, a save
 * refused by its fence — each asserted never to happen, so spin must
 * refute them.
 */

/* lease.pml's constants are the code's defaults (6/2/1/1); this model
 * runs a shorter lease by default so that its search fits in a test
 * (-DLEASE=6 checks the defaults, in minutes) */
#ifndef LEASE
#define LEASE    4
#endif
#ifndef RENEW
#define RENEW    2
#endif
#define ACQUIRE  1
#ifndef MARGIN
#define MARGIN   1
#endif
#ifndef BOUND
#define BOUND    (LEASE + ACQUIRE) /* failover within lease + acquire */
#endif
#ifndef N
#define N 2
#endif
#ifndef HORIZON
#define HORIZON 10
#endif
#ifndef MAXPAUSE
#define MAXPAUSE 1
#endif
#ifndef MAXCRASH
#define MAXCRASH 1
#endif
#ifndef MAXGIVE
#define MAXGIVE 1
#endif
#ifndef MAXSAVE
#define MAXSAVE 1   /* saves in one run (2: 3 times the states, no new finding) */
#endif

/* ---- the database ---- */
byte now;
byte lep[N];         /* member lease epoch, 0 = no row */
byte lexp[N];        /* member lease expiry */
byte anode;          /* node + 1 the singleton is assigned to, 0 = none */
byte anep;           /* that node's lease epoch at the assignment */
byte agen;           /* the generation: the singleton's fencing token */
byte lastSave;       /* ghost: generation of the last committed save */

#define leaseLive(j, e) (lep[j] == (e) && lexp[j] > now)
#ifdef BUG_DEAD_LIVE
#define assignedLive (anode != 0 && lep[anode-1] == anep)
#else
#define assignedLive (anode != 0 && leaseLive(anode-1, anep))
#endif

/* ---- the nodes ---- */
mtype = { IDLE, ACQ, LIVE, REN, PLACE, GIVE };
mtype ph[N];         /* the node's loop; a request in flight in ACQ..GIVE */
bool applied[N];     /* the database has applied it; the answer is in res */
byte res[N];
byte target[N];      /* a give's receiving node */
byte reqep[N];       /* the epoch a request in flight names */
byte reqgen[N];      /* the generation a give names */
byte myep[N];        /* this term's member lease epoch, 0 = none */
byte sentAt[N];
byte trusted[N];     /* local deadline */
byte wake[N];        /* next renew (or acquire) */
byte pwake[N];       /* next placement */
byte kgen[N];        /* the generation this node read as its own, 0 = none */
byte rgen[N];        /* the body runs under this generation, 0 = stopped */
byte svgen[N];       /* a save in flight under this generation, 0 = none */
byte svep[N];        /* and the node epoch it was sent under */
bool paused[N];
bool dead[N];
byte pauses, crashes, gives, saves;
byte noActor;
byte sinceGive;       /* ticks since a give committed, while nobody runs it; 0 = none */

#define acts(j) (rgen[j] != 0 && now < trusted[j])
#define isLive(j) (!dead[j] && !paused[j])

inline g1(i) {
	j = 0;
	do
	:: j < N -> assert(j == i || !acts(j)); j++
	:: else -> j = 0; break
	od
}

/* the term ends: bodies stop, assignments are forgotten */
inline endTerm(i) {
	myep[i] = 0; rgen[i] = 0;
#ifndef BUG_KEEP
	kgen[i] = 0;
#endif
	ph[i] = IDLE; wake[i] = now
}

/* The database applies node i's request (ACQ, REN, PLACE, GIVE). */
inline applyReq(i) {
	if
		:: ph[i] == ACQ && !applied[i] ->
			if
			:: lexp[i] <= now -> lep[i]++; lexp[i] = now + LEASE; res[i] = lep[i]
			:: else -> res[i] = 0
			fi;
			applied[i] = 1
		:: ph[i] == REN && !applied[i] ->
			if
			:: leaseLive(i, reqep[i]) -> lexp[i] = now + LEASE; res[i] = 1;
				if :: anode == i + 1 && anep == reqep[i] -> noActor = 0 :: else fi
			:: else -> res[i] = 0
			fi;
			applied[i] = 1
		:: ph[i] == PLACE && !applied[i] ->
			if
			:: leaseLive(i, reqep[i]) && !assignedLive ->
#ifdef REACH_REASSIGN
				assert(anode == 0 || anode == i + 1);
#endif
				anode = i + 1; anep = reqep[i]; agen++; noActor = 0
			:: else
			fi;
			if
			:: anode == i + 1 && anep == reqep[i] && leaseLive(i, reqep[i]) -> res[i] = 100 + agen
			:: anode != 0 && anode != i + 1 && assignedLive -> res[i] = lexp[anode-1]
			:: else -> res[i] = 0
			fi;
			applied[i] = 1
		:: ph[i] == GIVE && !applied[i] ->
			j = target[i];
			if
			:: anode == i + 1 && anep == reqep[i] && agen == reqgen[i] && leaseLive(i, reqep[i]) && lep[j] != 0 && lexp[j] > now ->
#ifdef REACH_GIVE
				assert(false);
#endif
				anode = j + 1; anep = lep[j]; agen++;
				noActor = 0; sinceGive = 1
			:: else
			fi;
			j = 0; applied[i] = 1
	fi
}

/* Node i receives the answer to its request. */
inline receive(i) {
	if
	:: ph[i] == ACQ ->
		if
		:: res[i] != 0 -> myep[i] = res[i]; trusted[i] = sentAt[i] + LEASE - MARGIN;
			wake[i] = now + RENEW; pwake[i] = now; ph[i] = LIVE;
			/* BUG_KEEP: an assignment kept from the term before */
			if :: kgen[i] != 0 -> rgen[i] = kgen[i]; g1(i) :: else fi
		:: else -> wake[i] = now + ACQUIRE; ph[i] = IDLE
		fi
	:: ph[i] == REN ->
		if
		:: res[i] != 0 && now < trusted[i] ->
			trusted[i] = sentAt[i] + LEASE - MARGIN; wake[i] = now + RENEW; ph[i] = LIVE;
			if :: acts(i) -> g1(i) :: else fi
		:: else -> endTerm(i)
		fi
	:: ph[i] == PLACE ->
		ph[i] = LIVE;
		if
		:: now >= trusted[i] -> skip /* the deadline step ends the term */
		:: now < trusted[i] && res[i] >= 100 -> kgen[i] = res[i] - 100; pwake[i] = now + RENEW;
			/* the body starts under the generation read */
			if :: rgen[i] == 0 -> rgen[i] = kgen[i]; g1(i) :: else fi
		:: now < trusted[i] && res[i] < 100 && res[i] > now -> kgen[i] = 0; rgen[i] = 0;
			/* placed elsewhere: look again when that lease is due */
			if :: res[i] < now + RENEW -> pwake[i] = res[i] :: else -> pwake[i] = now + RENEW fi
		:: now < trusted[i] && res[i] < 100 && res[i] <= now -> kgen[i] = 0; rgen[i] = 0; pwake[i] = now + RENEW
		fi
	:: ph[i] == GIVE ->
		ph[i] = LIVE; kgen[i] = 0; pwake[i] = now;
#ifdef BUG_NO_STOP
		rgen[i] = 0;
#endif
		skip
	fi;
	res[i] = 0; applied[i] = 0; sentAt[i] = 0; reqep[i] = 0; reqgen[i] = 0; target[i] = 0
}

inline crash(i) {
	dead[i] = 1; crashes++; paused[i] = 0; rgen[i] = 0; kgen[i] = 0; myep[i] = 0
}

/* A request is sent: the database applies it and the node receives the
 * answer at once, or the node pauses or crashes with the request in
 * flight, or with its answer not yet received (Db applies a paused or
 * crashed node's request at any later time). */
inline send(i) {
	if
	:: applyReq(i);
		if
		:: receive(i)
		:: pauses < MAXPAUSE -> paused[i] = 1; pauses++
		:: crashes < MAXCRASH -> crash(i)
		fi
	:: pauses < MAXPAUSE -> paused[i] = 1; pauses++
	:: crashes < MAXCRASH -> crash(i)
	fi
}

proctype Node(byte i) {
	byte j;
end:	do
	/* acquire the member lease */
	:: atomic { isLive(i) && ph[i] == IDLE && now >= wake[i] -> sentAt[i] = now; applied[i] = 0; ph[i] = ACQ; send(i) }
	/* the local deadline passed */
	:: atomic { isLive(i) && ph[i] == LIVE && now >= trusted[i] -> endTerm(i) }
	/* renew */
	:: atomic { isLive(i) && ph[i] == LIVE && now >= wake[i] && now < trusted[i] -> sentAt[i] = now; reqep[i] = myep[i]; applied[i] = 0; ph[i] = REN; send(i) }
	/* place: take the singleton if it is unassigned or its node is dead;
	 * read it back */
	:: atomic { isLive(i) && ph[i] == LIVE && now >= pwake[i] && now < trusted[i] -> reqep[i] = myep[i]; applied[i] = 0; ph[i] = PLACE; send(i) }
	/* an answer that came after a pause */
	:: atomic { isLive(i) && applied[i] && ph[i] != IDLE && ph[i] != LIVE -> receive(i) }
	/* save */
	:: atomic { isLive(i) && acts(i) && svgen[i] == 0 && saves < MAXSAVE -> saves++; svgen[i] = rgen[i]; svep[i] = myep[i] }
	/* give the singleton to another node (rebalancing) */
	:: atomic { isLive(i) && ph[i] == LIVE && kgen[i] != 0 && gives < MAXGIVE && now < trusted[i] ->
		select(j : 0 .. N-1);
		if
		:: j != i -> gives++; target[i] = j; reqep[i] = myep[i]; reqgen[i] = kgen[i];
#ifndef BUG_NO_STOP
			rgen[i] = 0; /* the body stops before the give is sent */
#endif
			applied[i] = 0; ph[i] = GIVE; send(i)
		:: else
		fi; j = 0 }
	od
}

/* The database applies the request of a paused or crashed node at any
 * time after it was sent, and a save at any time. */
active proctype Db() {
	byte i, j;
end:	do
	:: atomic { select(i : 0 .. N-1);
		if
		:: (paused[i] || dead[i]) && !applied[i] && (ph[i] == ACQ || ph[i] == REN || ph[i] == PLACE || ph[i] == GIVE) -> applyReq(i)
		:: svgen[i] != 0 ->
			/* a save: one statement, fenced by the generation and the
			 * node's lease */
			if
#ifdef BUG_GEN_ONLY
			:: agen == svgen[i] ->
#else
			:: agen == svgen[i] && anode == i + 1 && anep == svep[i] && leaseLive(i, svep[i]) ->
#endif
				assert(svgen[i] >= lastSave);
				/* G2: the writer's lease is live in database time */
				assert(anode == i + 1 && leaseLive(i, anep));
				lastSave = svgen[i]
			:: else ->
#ifdef REACH_FENCE
				assert(false);
#endif
				skip
			fi;
			svgen[i] = 0; svep[i] = 0
		:: else
		fi; i = 0 }
	od
}

active proctype Env() {
	byte i;
end:	do
	:: atomic { pauses < MAXPAUSE -> select(i : 0 .. N-1); if :: isLive(i) -> paused[i] = 1; pauses++ :: else fi; i = 0 }
	:: atomic { select(i : 0 .. N-1); if :: paused[i] -> paused[i] = 0 :: else fi; i = 0 }
	/* kill -9 */
	:: atomic { crashes < MAXCRASH -> select(i : 0 .. N-1);
		if
		:: !dead[i] -> crash(i)
		:: else
		fi; i = 0 }
	od
}

/* A live node whose request is unanswered, or with a step due, holds the
 * clock. */
#define idle(i) (dead[i] || paused[i] || \
	(!(ph[i] != IDLE && ph[i] != LIVE) && \
	 !(ph[i] == IDLE && now >= wake[i]) && \
	 !(ph[i] == LIVE && (now >= wake[i] || now >= trusted[i] || now >= pwake[i] || (kgen[i] != 0 && rgen[i] == 0)))))

#define past(v) if :: v != 0 && v <= now -> v = 0 :: else fi

active proctype Clock() {
	byte i;
	bool live, othersOK, acting;
end:	do
	:: atomic { now < HORIZON && idle(0) && idle(1) && (N < 3 || idle(2)) ->
		live = 0; acting = 0; othersOK = 1; i = 0;
		do
		:: i < N ->
			live = live || isLive(i);
			acting = acting || (isLive(i) && acts(i));
			othersOK = othersOK && (i + 1 == anode || isLive(i));
			i++
		:: else -> break
		od;
		if
		:: live && othersOK && !acting -> noActor++
		:: else -> noActor = 0
		fi;
		assert(noActor <= BOUND);
		/* a handover: the receiving node runs it within one renew
		 * interval, while it is live in the term it was given under (a
		 * give to a lease whose process died and came back with no term
		 * is a failover, bounded above) */
		if
		:: sinceGive != 0 && !acting && anode != 0 && isLive(anode - 1) && myep[anode - 1] == anep ->
			sinceGive++; assert(sinceGive <= RENEW + 1)
		:: else -> sinceGive = 0
		fi;
		now++;
		/* instants now past compare as any other past instant: zeroed,
		 * so that states differing only in them are one */
		i = 0;
		do
		:: i < N ->
			past(wake[i]); past(pwake[i]); past(trusted[i]); past(lexp[i]);
			if :: ph[i] == IDLE || ph[i] == LIVE -> sentAt[i] = 0 :: else fi;
			i++
		:: else -> break
		od;
		i = 0; live = 0; acting = 0; othersOK = 0
	}
	:: timeout -> assert(now == HORIZON); break
	od
}

init {
	byte i;
	atomic {
		i = 0;
		do
		:: i < N -> ph[i] = IDLE; run Node(i); i++
		:: else -> break
		od
	}
}
