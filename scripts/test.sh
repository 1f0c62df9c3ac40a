#!/usr/bin/env bash
# The project's one test command:
#
#   bash scripts/test.sh                       # gofmt, go vet, go test -race ./...
#   bash scripts/test.sh ./postgres/...        # go test only these packages
#   bash scripts/test.sh -run TestFoo ./sqlite # flags too (give packages as well)
#
# Without arguments it also runs the fuzz targets beyond their seed corpus
# (which every go test run covers), each for a count of inputs of about 10 s
# here, or for SQLEASE_FUZZTIME (a duration, or a count such as 5000x).
#
# Arguments, when given, replace "./..." on the go test command line; they come
# after the defaults (-race -count=1 -p 4 -timeout 12m), so e.g. -timeout 30m
# overrides. gofmt and go vet always cover the whole module.
#
# Unless SQLEASE_TEST_POSTGRES_URL is already set (then that server is used and
# nothing is started), a throwaway PostgreSQL 15 is started for the run on a free
# 127.0.0.1 port and exported as SQLEASE_TEST_POSTGRES_URL. It is stopped and its
# directory removed when this script exits, whatever the outcome (tests failing,
# Ctrl-C, SIGTERM). Runs as root (the server then runs as the OS user postgres,
# created if missing) or as an ordinary user. SQLEASE_TEST_PG_BIN overrides the
# binary directory (default /usr/lib/postgresql/15/bin).
#
# Likewise, unless SQLEASE_TEST_MYSQL_URL is already set, a throwaway MariaDB is
# started (as the OS user mysql when run as root) and exported as
# SQLEASE_TEST_MYSQL_URL=mysql://sqlease:<random>@127.0.0.1:<port>/sqlease; the
# user sqlease may create and drop the databases named sqlease% (and grant on
# them, and create users: the least-privilege test does). When mariadbd
# is missing and the script runs as root, the Debian package mariadb-server is
# installed first (apt-get; the package's own service is not started). The
# server is killed and its directory removed when the script exits, and by a
# watchdog should the script itself be killed.
#
# Scheduling: the whole suite runs its longest package (internal/faults) and
# then model in a go test of their own from the start, the others
# SQLEASE_TEST_P at a time (default 4: most of them wait on leases and
# processes, not on a CPU) in the order of quiet_times below, and the fuzz
# stage once those are done.
#
# Headroom and starvation: a package is stopped at 12 minutes, at least twice
# the longest package's time on a quiet machine (quiet_times below). While go
# test runs, a probe measures every 15 s what share of a core a runnable thread
# gets (a short busy loop's CPU time over its wall time: about 1 on a quiet
# machine). If it stays below SQLEASE_STARVED_SHARE (per mille, default 150)
# for SQLEASE_STARVED_SECONDS (default 180; 0 turns the probe off), the run is
# stopped with a message saying so, rather than failing later at a timeout or
# a latency bound; the summary reports the shares seen either way.
#
# Exit status: that of go test, or 1 if gofmt, go vet or the server setup fails,
# or 3 if the machine was starved.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

PG_BIN=${SQLEASE_TEST_PG_BIN:-/usr/lib/postgresql/15/bin}

say() { printf '==> %s\n' "$*"; }
die() {
	printf 'scripts/test.sh: error: %s\n' "$*" >&2
	exit 1
}

pg_dir=""  # the throwaway server's directory, once it exists
pg_run=()  # prefix that runs PostgreSQL binaries as their OS user
md_dir=""  # the throwaway MariaDB's directory, once it exists
md_pid=""  # its mariadbd, while it runs
md_dog=""  # its watchdog

cleanup() {
	local status=$?
	trap - EXIT INT TERM HUP
	if [[ -n ${starve_pid:-} ]]; then
		kill "$starve_pid" 2>/dev/null || true
	fi
	if [[ -n $pg_dir ]]; then
		say "stopping PostgreSQL and removing $pg_dir"
		if [[ -f $pg_dir/data/postmaster.pid ]]; then
			"${pg_run[@]}" "$PG_BIN/pg_ctl" stop -D "$pg_dir/data" -m immediate -s >/dev/null 2>&1 || true
		fi
		rm -rf "$pg_dir" || true
	fi
	if [[ -n $md_dir ]]; then
		say "stopping MariaDB and removing $md_dir"
		stop_mariadb
		if [[ -n $md_dog ]]; then
			kill -KILL "$md_dog" 2>/dev/null || true # it ignores INT and TERM
			wait "$md_dog" 2>/dev/null || true
		fi
		rm -rf "$md_dir" || true
	fi
	exit "$status"
}
test_pgid="" # go test's process group, while it runs

# on_signal forwards the signal to go test (and so to the test binaries) and
# exits once it is gone; the EXIT trap then stops the servers.
on_signal() {
	if [[ -n $test_pgid ]]; then
		kill -s "$1" -- "-$test_pgid" 2>/dev/null || true
		wait "$test_pgid" 2>/dev/null || true
	fi
	exit "$2"
}
trap cleanup EXIT
trap 'on_signal INT 130' INT
trap 'on_signal TERM 143' TERM
trap 'on_signal HUP 129' HUP

# free_port prints a TCP port on 127.0.0.1 that is free right now. Another
# process may still take it before the server binds; start_postgres retries.
free_port() {
	if command -v python3 >/dev/null 2>&1 &&
		python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])' 2>/dev/null; then
		return 0
	fi
	local p _
	for _ in $(seq 200); do
		p=$((20000 + RANDOM % 12000)) # below the usual ephemeral range
		if ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then
			echo "$p"
			return 0
		fi
	done
	return 1
}

# port_taken_or_die NAME LOG ATTEMPT PORT WHY: after the server NAME failed
# to start on PORT, returns (for another attempt, with another port) when
# its LOG says the port was taken meanwhile and attempts are left; else
# prints the log and dies with WHY.
port_taken_or_die() {
	local name=$1 log=$2 attempt=$3 port=$4 why=$5
	if grep -qi 'address already in use' "$log" 2>/dev/null && ((attempt < 5)); then
		say "port $port was taken meanwhile; trying another"
		return 0
	fi
	printf -- '--- %s server log (%s) ---\n' "$name" "$log" >&2
	cat "$log" >&2 || true
	die "$why"
}

start_postgres() {
	local b
	if [[ ! -x $PG_BIN/initdb && -z ${SQLEASE_TEST_PG_BIN:-} && $(id -u) -eq 0 ]] && command -v apt-get >/dev/null 2>&1; then
		# Machines of this kind have it; a fresh one without it gets it here.
		say "installing postgresql-15 (apt-get) for the PostgreSQL tests"
		DEBIAN_FRONTEND=noninteractive apt-get install -y -q postgresql-15 >/tmp/sqlease-apt-postgresql.log 2>&1 ||
			{ apt-get update -q >>/tmp/sqlease-apt-postgresql.log 2>&1 &&
				DEBIAN_FRONTEND=noninteractive apt-get install -y -q postgresql-15 >>/tmp/sqlease-apt-postgresql.log 2>&1; } ||
			die "installing postgresql-15 failed (log: /tmp/sqlease-apt-postgresql.log)"
	fi
	for b in initdb pg_ctl postgres pg_isready; do
		[[ -x $PG_BIN/$b ]] || die "PostgreSQL binary $PG_BIN/$b not found (apt-get install -y postgresql-15, set SQLEASE_TEST_PG_BIN, or point SQLEASE_TEST_POSTGRES_URL at a server)"
	done

	if [[ $(id -u) -eq 0 ]]; then
		# PostgreSQL refuses to run as root.
		if ! id postgres >/dev/null 2>&1; then
			say "creating OS user postgres"
			useradd --system --no-create-home postgres || id postgres >/dev/null 2>&1 ||
				die "cannot create OS user postgres"
		fi
		pg_run=(runuser -u postgres --)
	fi
	# The tmpfs /dev/shm is preferred: initdb writes about a thousand files,
	# which took 1.4 s on an ext4 /tmp and 0.35 s there. The directory must be
	# enterable by the server's OS user (TMPDIR might not be).
	pg_dir=$(mktemp -d /dev/shm/sqlease-test-pg.XXXXXXXX 2>/dev/null) ||
		pg_dir=$(mktemp -d /tmp/sqlease-test-pg.XXXXXXXX)
	if ((${#pg_run[@]})); then
		chown postgres: "$pg_dir"
	fi
	local data=$pg_dir/data log=$pg_dir/postgres.log out

	local t0=${EPOCHREALTIME//[.,]/}
	say "initdb: $data"
	if ! out=$("${pg_run[@]}" "$PG_BIN/initdb" -D "$data" -U postgres -A trust -E UTF8 \
		--locale=C --no-sync --no-instructions 2>&1); then
		printf '%s\n' "$out" >&2
		die "initdb failed"
	fi
	cat >>"$data/postgresql.conf" <<EOF

# --- scripts/test.sh ---
listen_addresses = '127.0.0.1'
unix_socket_directories = '$data'
max_connections = 200
fsync = off
synchronous_commit = off
full_page_writes = off
tcp_keepalives_idle = 5
tcp_keepalives_interval = 2
tcp_keepalives_count = 3
EOF

	local attempt port
	for attempt in 1 2 3 4 5; do
		port=$(free_port) || die "no free TCP port found"
		rm -f "$log" # so that only this attempt's messages are looked at
		say "starting PostgreSQL on 127.0.0.1:$port"
		if "${pg_run[@]}" "$PG_BIN/pg_ctl" start -D "$data" -l "$log" -o "-p $port" -w -t 60 -s >/dev/null 2>&1; then
			break
		fi
		port_taken_or_die PostgreSQL "$log" "$attempt" "$port" "PostgreSQL did not start"
	done

	# pg_ctl -w waited for the server; confirm it answers on TCP too.
	local deadline=$((SECONDS + 30))
	until "$PG_BIN/pg_isready" -q -h 127.0.0.1 -p "$port" -U postgres -d postgres -t 1; do
		if ((SECONDS >= deadline)); then
			printf -- '--- PostgreSQL server log (%s) ---\n' "$log" >&2
			cat "$log" >&2 || true
			die "PostgreSQL on port $port not ready after 30s"
		fi
		sleep 0.1
	done

	export SQLEASE_TEST_POSTGRES_URL="postgres://postgres@127.0.0.1:$port/postgres?sslmode=disable"
	say "PostgreSQL ready in $(((${EPOCHREALTIME//[.,]/} - t0) / 1000)) ms: SQLEASE_TEST_POSTGRES_URL=$SQLEASE_TEST_POSTGRES_URL"
}

# stop_mariadb kills the throwaway mariadbd (its data is thrown away, so
# there is nothing to shut down cleanly) and waits until it is gone.
stop_mariadb() {
	[[ -n $md_pid ]] || return 0
	kill -KILL "$md_pid" 2>/dev/null || true
	wait "$md_pid" 2>/dev/null || true
	md_pid=""
}

# mariadb_tool prints the path of the first of the given MariaDB programs
# found in PATH or in /usr/sbin (not in an ordinary user's PATH).
mariadb_tool() {
	local name
	for name in "$@"; do
		if command -v "$name" 2>/dev/null; then
			return 0
		fi
		if [[ -x /usr/sbin/$name ]]; then
			echo "/usr/sbin/$name"
			return 0
		fi
	done
	return 1
}

# install_mariadb installs the Debian package mariadb-server without letting
# it start the system's own server.
install_mariadb() {
	[[ $(id -u) -eq 0 ]] && command -v apt-get >/dev/null 2>&1 ||
		die "mariadbd not found (as root with apt-get this script installs mariadb-server; or point SQLEASE_TEST_MYSQL_URL at a server)"
	local policy=/usr/sbin/policy-rc.d made_policy="" t0=$SECONDS
	if [[ ! -e $policy ]]; then
		printf '#!/bin/sh\nexit 101\n' >"$policy" && chmod +x "$policy" && made_policy=1
	fi
	say "installing mariadb-server (apt-get)"
	local ok=""
	if DEBIAN_FRONTEND=noninteractive apt-get install -y -q mariadb-server >/tmp/sqlease-apt.log 2>&1; then
		ok=1
	else
		say "apt-get install failed; apt-get update and retrying"
		apt-get update -q >>/tmp/sqlease-apt.log 2>&1 &&
			DEBIAN_FRONTEND=noninteractive apt-get install -y -q mariadb-server >>/tmp/sqlease-apt.log 2>&1 && ok=1
	fi
	[[ -n $made_policy ]] && rm -f "$policy"
	if [[ -z $ok ]]; then
		tail -n 30 /tmp/sqlease-apt.log >&2 || true
		die "installing mariadb-server failed (log: /tmp/sqlease-apt.log)"
	fi
	say "mariadb-server installed in $((SECONDS - t0)) s"
}

start_mariadb() {
	local mariadbd install_db admin client
	if ! mariadbd=$(mariadb_tool mariadbd mysqld); then
		install_mariadb
		mariadbd=$(mariadb_tool mariadbd mysqld) || die "mariadbd still not found after installing mariadb-server"
	fi
	install_db=$(mariadb_tool mariadb-install-db mysql_install_db) || die "mariadb-install-db not found"
	admin=$(mariadb_tool mariadb-admin mysqladmin) || die "mariadb-admin not found"
	client=$(mariadb_tool mariadb mysql) || die "the mariadb client not found"

	# As root, mariadbd runs as the OS user mysql (--user), in a directory
	# that user owns; the tmpfs /dev/shm is preferred, as for PostgreSQL.
	local as_user=()
	if [[ $(id -u) -eq 0 ]]; then
		id mysql >/dev/null 2>&1 || useradd --system --no-create-home mysql || id mysql >/dev/null 2>&1 ||
			die "cannot create OS user mysql"
		as_user=(--user=mysql)
	fi
	md_dir=$(mktemp -d /dev/shm/sqlease-test-mariadb.XXXXXXXX 2>/dev/null) ||
		md_dir=$(mktemp -d /tmp/sqlease-test-mariadb.XXXXXXXX)
	if ((${#as_user[@]})); then
		chown mysql: "$md_dir"
	fi
	local data=$md_dir/data log=$md_dir/mariadb.log sock=$md_dir/mariadb.sock out
	local t0=${EPOCHREALTIME//[.,]/}
	say "mariadb-install-db: $data"
	if ! out=$("$install_db" --no-defaults "${as_user[@]}" --datadir="$data" --auth-root-authentication-method=normal \
		--skip-test-db --skip-name-resolve --innodb-log-file-size=16M 2>&1); then
		printf '%s\n' "$out" >&2
		die "mariadb-install-db failed"
	fi

	# Nothing here needs to survive a crash: no binary log, no flushing at
	# commit, no doublewrite buffer.
	local attempt port deadline
	for attempt in 1 2 3 4 5; do
		port=$(free_port) || die "no free TCP port found"
		rm -f "$log"
		say "starting MariaDB on 127.0.0.1:$port"
		"$mariadbd" --no-defaults "${as_user[@]}" --datadir="$data" --port="$port" --bind-address=127.0.0.1 \
			--socket="$sock" --pid-file="$md_dir/mariadb.pid" --log-error="$log" \
			--skip-log-bin --skip-name-resolve --default-time-zone=+00:00 \
			--character-set-server=utf8mb4 --collation-server=utf8mb4_bin --max-connections=500 \
			--innodb-flush-log-at-trx-commit=0 --innodb-doublewrite=0 --innodb-log-file-size=16M \
			--innodb-buffer-pool-size=128M </dev/null >/dev/null 2>&1 &
		md_pid=$!
		# Should this script be killed (SIGKILL: no trap runs), take the
		# server down with it.
		if [[ -z $md_dog ]]; then
			(
				trap '' INT TERM HUP
				while kill -0 "$$" 2>/dev/null; do sleep 1; done
				kill -KILL "$(cat "$md_dir/mariadb.pid" 2>/dev/null)" 2>/dev/null || true
				sleep 0.5
				rm -rf "$md_dir"
			) </dev/null >/dev/null 2>&1 &
			md_dog=$!
		fi
		# Ready once it answers on its own socket (a port can be taken by
		# another process before the server binds it; the socket cannot).
		deadline=$((SECONDS + 30))
		until "$admin" --no-defaults --socket="$sock" -uroot ping >/dev/null 2>&1; do
			if ! kill -0 "$md_pid" 2>/dev/null || ((SECONDS >= deadline)); then
				break
			fi
			sleep 0.05
		done
		if "$admin" --no-defaults --socket="$sock" -uroot ping >/dev/null 2>&1; then
			break
		fi
		stop_mariadb
		port_taken_or_die MariaDB "$log" "$attempt" "$port" "MariaDB did not start within 30s"
	done

	local password
	password=$(od -An -N12 -tx1 /dev/urandom | tr -d ' \n')
	if ! out=$("$client" --no-defaults --socket="$sock" -uroot -e "
		CREATE DATABASE sqlease CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
		CREATE USER 'sqlease'@'127.0.0.1' IDENTIFIED BY '$password';
		GRANT ALL PRIVILEGES ON \`sqlease%\`.* TO 'sqlease'@'127.0.0.1' WITH GRANT OPTION;
		GRANT CREATE USER ON *.* TO 'sqlease'@'127.0.0.1';" 2>&1); then
		printf '%s\n' "$out" >&2
		die "creating the MariaDB user and database failed"
	fi
	# The URL works over TCP, as the tests will use it.
	if ! out=$(MYSQL_PWD=$password "$client" --no-defaults --protocol=tcp -h127.0.0.1 -P"$port" -usqlease sqlease \
		-e 'SELECT 1' 2>&1); then
		printf '%s\n' "$out" >&2
		die "MariaDB on port $port refuses the sqlease user over TCP"
	fi
	export SQLEASE_TEST_MYSQL_URL="mysql://sqlease:$password@127.0.0.1:$port/sqlease"
	say "MariaDB $("$mariadbd" --version | sed -n 's/.*Ver \([^ ]*\).*/\1/p') ready in $(((${EPOCHREALTIME//[.,]/} - t0) / 1000)) ms: SQLEASE_TEST_MYSQL_URL=mysql://sqlease:…@127.0.0.1:$port/sqlease"
}

# --- headroom and starvation ---
# Quiet-machine times of the longest packages (seconds, 2 cores, each run
# alone; for failover, schedproc and e2e, whose tests now run partly in
# parallel, their times on a loaded machine), and of the whole run: what the
# start announces and what the timeout must cover twice over. The whole
# suite starts them in this order: the first, the longest, in a go test of
# its own with model after it (beside); then the others, those that mostly
# wait on leases and processes between those that keep a core busy
# (scheduler, httpapi, internal/cli), so that these do not all run at once.
# model keeps a core busy for a minute (spin): beside faults, which mostly
# waits, it runs after the timing-sensitive scheduler tests rather than with
# them (two of scheduler's leader-fault tests failed, in 2 of 3 runs, with
# it started among the others on a loaded machine).
quiet_total_min=7
quiet_times="internal/faults:254 model:60 internal/failover:128 scheduler:135 internal/hafailover:66 internal/schedproc:42 httpapi:37 internal/e2e:67 internal/cli:38 postgres:48 mysql:47 internal/multiproc:41"
pkg_timeout=12m

# cpu_share prints the share of a core (per mille) this shell got while
# running a short busy loop: its CPU time over the loop's wall time.
cpu_share() {
	local st u0 u1 t0 t1 j
	read -r -a st <"/proc/$BASHPID/stat"
	u0=$((st[13] + st[14]))
	t0=${EPOCHREALTIME//[.,]/}
	for ((j = 0; j < 60000; j++)); do :; done
	t1=${EPOCHREALTIME//[.,]/}
	read -r -a st <"/proc/$BASHPID/stat"
	u1=$((st[13] + st[14]))
	# ticks of 10 ms (USER_HZ 100) over wall microseconds
	echo $(((u1 - u0) * 10000 * 1000 / ((t1 - t0) > 0 ? (t1 - t0) : 1)))
}

# check_headroom fails unless the package timeout is at least twice every
# quiet time above.
check_headroom() {
	local limit=${pkg_timeout%m} entry longest=0 name=""
	for entry in $quiet_times; do
		if ((${entry#*:} > longest)); then
			longest=${entry#*:} name=${entry%%:*}
		fi
	done
	((limit * 60 >= 2 * longest)) ||
		die "the package timeout $pkg_timeout is less than twice ${name}'s quiet time (${longest}s): raise it"
	echo "$name ~$((longest / 60))m$((longest % 60))s"
}

starve_log=""  # the probe's samples: "<epoch seconds> <share per mille>"
starve_pid=""  # the probe, while go test runs
starved_file="" # written by the probe when it stops the run

# starvation_probe samples cpu_share every 15 s; once every sample of the
# last SQLEASE_STARVED_SECONDS is below SQLEASE_STARVED_SHARE, it says so and
# stops go test (process group $1).
starvation_probe() {
	local pgid=$1 limit=${SQLEASE_STARVED_SHARE:-150} window=${SQLEASE_STARVED_SECONDS:-180}
	local share low_since=0 now
	trap - EXIT INT TERM HUP
	while sleep 15; do
		share=$(cpu_share)
		now=$SECONDS
		echo "$now $share" >>"$starve_log"
		if ((share >= limit)); then
			low_since=0
			continue
		fi
		((low_since)) || low_since=$now
		if ((window > 0 && now - low_since >= window)); then
			{
				printf '\nscripts/test.sh: the machine is starved: for %d s a runnable thread got under %d.%d%% of a core (last %d.%d%%; load %s on %s cores).\n' \
					"$((now - low_since))" "$((limit / 10))" "$((limit % 10))" "$((share / 10))" "$((share % 10))" "$(cut -d' ' -f1-3 /proc/loadavg)" "$(nproc)"
				printf 'scripts/test.sh: stopping the tests rather than letting them fail at a timeout or a latency bound; run again on a quieter machine (SQLEASE_STARVED_SECONDS=0 turns this check off).\n'
			} | tee "$starved_file" >&2
			kill -TERM -- "-$pgid" 2>/dev/null || true
			return
		fi
	done
}

# share_summary prints the probe's samples: median and lowest share.
share_summary() {
	[[ -s $starve_log ]] || return 0
	sort -k2 -n "$starve_log" | awk '{v[NR]=$2} END {printf "%d.%d%% median, %d.%d%% lowest, over %d samples", int(v[int((NR+1)/2)]/10), v[int((NR+1)/2)]%10, int(v[1]/10), v[1]%10, NR}'
}
# --- end headroom and starvation ---

if ! command -v go >/dev/null 2>&1 && [[ -x /usr/local/go/bin/go ]]; then
	PATH=/usr/local/go/bin:$PATH
fi
command -v go >/dev/null 2>&1 || die "go not found in PATH"

say "gofmt -l ."
unformatted=$(gofmt -l .)
if [[ -n $unformatted ]]; then
	printf '%s\n' "$unformatted" >&2
	die "the files above are not gofmt-formatted (run gofmt -w on them)"
fi

say "go vet ./..."
go vet ./...

# --- tools some tests need, from Debian's packages when missing (as root) ---
# need COMMAND PACKAGE WHO: install PACKAGE unless COMMAND exists.
need() {
	command -v "$1" >/dev/null 2>&1 && return
	if [[ $(id -u) -eq 0 ]] && command -v apt-get >/dev/null 2>&1; then
		say "installing $2 (apt-get) for $3"
		DEBIAN_FRONTEND=noninteractive apt-get install -y -q "$2" >"/tmp/sqlease-apt-$2.log" 2>&1 ||
			{ apt-get update -q >>"/tmp/sqlease-apt-$2.log" 2>&1 &&
				DEBIAN_FRONTEND=noninteractive apt-get install -y -q "$2" >>"/tmp/sqlease-apt-$2.log" 2>&1; } ||
			die "installing $2 failed (log: /tmp/sqlease-apt-$2.log)"
	else
		say "$1 not found and not root: $3 will fail (apt-get install -y $2)"
	fi
}
need spin spin "the model checks in ./model"
need promtool prometheus "the alert rule tests in ./deploy"
need curl curl "the checkpoint and singleton scripts in ./internal/e2e and ./internal/faults, and the README's quick start"
# --- end tools ---

# --- chromium: the dashboard's browser tests (./internal/dashtest) drive it headless ---
need chromium chromium "the dashboard's browser tests in ./internal/dashtest"
# --- end chromium ---

# --- patroni, etcd: the Patroni failover tests (./internal/hacluster, ./internal/hafailover; SQLEASE_TEST_HA=0 skips them) ---
if [[ ${SQLEASE_TEST_HA:-} != 0 ]]; then
	need etcd etcd-server "the Patroni failover tests in ./internal/hafailover"
	need patroni patroni "the Patroni failover tests in ./internal/hafailover"
fi
# --- end patroni, etcd ---

if [[ -n ${SQLEASE_TEST_POSTGRES_URL:-} ]]; then
	say "using the PostgreSQL server given by SQLEASE_TEST_POSTGRES_URL (starting none)"
else
	start_postgres
fi

if [[ -n ${SQLEASE_TEST_MYSQL_URL:-} ]]; then
	say "using the MariaDB/MySQL server given by SQLEASE_TEST_MYSQL_URL (starting none)"
else
	start_mariadb
fi

fuzz=0
longest=$(check_headroom)
share_now=$(cpu_share)
machine="this machine now: load $(cut -d' ' -f1 /proc/loadavg) on $(nproc) cores, a runnable thread gets $((share_now / 10))% of a core"
if ((share_now < 500)); then
	machine+=": expect it to take longer"
fi
# Most packages spend their time waiting on lease durations and on the
# processes they start, not on the CPU: go test runs SQLEASE_TEST_P of them
# at once (default 4; go's own default is one per core).
par=${SQLEASE_TEST_P:-4}
[[ $par =~ ^[1-9][0-9]*$ ]] || die "SQLEASE_TEST_P must be a positive number of packages, not '$par'"
beside=() # the whole suite: the packages run one after the other beside the others
if (($# == 0)); then
	fuzz=1 # the whole suite also fuzzes for a bounded time
	# The longest package and model run in a go test of their own from the
	# start, the others in the order of quiet_times (go test starts packages
	# in the order given), and the fuzz stage once they are done, while the
	# first two may still run.
	beside=("./${quiet_times%%:*}" ./model)
	order=()
	for entry in $quiet_times; do
		[[ " ${beside[*]} " == *" ./${entry%%:*} "* ]] || order+=("./${entry%%:*}")
	done
	module=$(go list -m)
	while read -r p; do
		p=.${p#"$module"}
		[[ " ${beside[*]} ${order[*]} " == *" $p "* ]] || order+=("$p")
	done < <(go list -f '{{if or .TestGoFiles .XTestGoFiles}}{{.ImportPath}}{{end}}' ./...)
	set -- "${order[@]}"
	say "expected duration: about $quiet_total_min minutes on a quiet 2-core machine (longest package: $longest); $machine"
else
	say "expected duration: the packages' own (the whole suite: about $quiet_total_min minutes on a quiet 2-core machine); $machine"
fi
say "a package is stopped at $pkg_timeout, at least twice its quiet time (longest: $longest)"
if ((${#beside[@]})); then
	say "go test -race -count=1 -p 1 -timeout $pkg_timeout ${beside[*]} (beside the others; its output comes at the end)"
	say "go test -race -count=1 -p $par -timeout $pkg_timeout <the $# other packages with tests, in the order of quiet_times>"
else
	say "go test -race -count=1 -p $par -timeout $pkg_timeout $*"
fi
# The output is also kept, for the summary at the end: each package's time,
# the failed packages and the first failing tests of each.
test_log=$(mktemp)
head_log=$(mktemp)
ends_file=$(mktemp) # when each part of the run ended

# fuzz_stage runs the fuzz targets beyond their seed corpus, for a bounded
# time: any input either refused with a 4xx-class error or round-tripping.
# Each run starts from the seed corpus in a cache of its own: the shared one
# ($GOCACHE/fuzz) grows with every run on a machine, and once replaying it
# outlasted -fuzztime the target failed with "context deadline exceeded" (210
# cached inputs, here). A failing input is still written to testdata/fuzz.
#
# The budget is a count of inputs, not a duration: when a duration ran out,
# Go's fuzzing coordinator (before Go 1.27, go.dev/issue/75804) could report
# its own deadline as the target's failure ("context deadline exceeded" with
# no failing input; CI on ad6779f). The counts take about 10 s each here.
fuzz_stage() {
	local fuzzcache target budget rc=0
	fuzzcache=$(mktemp -d)
	for target in "FuzzDecodeJob ./httpapi 30000x" "FuzzConfigFile ./internal/cli 3000x" "FuzzRedact ./action 5000x" \
		"FuzzParseProcessSpec ./action 5000x" "FuzzForms ./dashboard 500x" "FuzzSingletonCreate ./internal/cli 500x"; do
		set -- $target
		budget=${SQLEASE_FUZZTIME:-$3}
		say "go test -run '^\$' -fuzz $1 -fuzztime $budget -fuzzminimizetime 2s -parallel 1 $2 -args -test.fuzzcachedir=$fuzzcache"
		if ! go test -run '^$' -fuzz "$1" -fuzztime "$budget" -fuzzminimizetime 2s -parallel 1 "$2" -args -test.fuzzcachedir="$fuzzcache" </dev/null; then
			rc=1
			break
		fi
	done
	rm -rf "$fuzzcache"
	return "$rc"
}

# run_tests is go test (two of them for the whole suite) and the fuzz stage;
# its status is the first failure's.
run_tests() {
	local head_pid="" rc=0 head_rc=0 t0=$SECONDS
	if ((${#beside[@]})); then
		go test -race -count=1 -p 1 -timeout "$pkg_timeout" "${beside[@]}" </dev/null >"$head_log" 2>&1 &
		head_pid=$!
	fi
	go test -race -count=1 -p "$par" -timeout "$pkg_timeout" "$@" </dev/null 2>&1 | tee "$test_log" || rc=$?
	# Which part of the run was its longest: a line for the summary.
	local ends="the packages: $((SECONDS - t0)) s"
	if ((rc == 0 && fuzz)); then
		fuzz_stage || rc=1
		ends+=", then the fuzz stage: $((SECONDS - t0)) s"
	fi
	if [[ -n $head_pid ]]; then
		wait "$head_pid" || head_rc=$?
		cat "$head_log"
		cat "$head_log" >>"$test_log"
		((rc)) || rc=$head_rc
		ends+="; beside them ${beside[*]#./}: $((SECONDS - t0)) s"
	fi
	echo "$ends" >"$ends_file"
	return "$rc"
}

# The tests run in their own process group (set -m) in the background, so
# that a signal to this script alone is forwarded to them, instead of
# waiting for the tests to finish. (stdin: a background job reading the
# terminal would be stopped.)
status=0
starve_log=$(mktemp)
starved_file=$(mktemp -u)
set -m
(set -o pipefail; run_tests "$@") &
test_pgid=$!
set +m
if [[ ${SQLEASE_STARVED_SECONDS:-180} != 0 ]]; then
	starvation_probe "$test_pgid" </dev/null &
	starve_pid=$!
fi
wait "$test_pgid" || status=$?
test_pgid=""
if [[ -n $starve_pid ]]; then
	kill "$starve_pid" 2>/dev/null || true
	wait "$starve_pid" 2>/dev/null || true
	starve_pid=""
fi
if [[ -s $starved_file ]]; then
	status=3
fi
summary() {
	# Package times, longest first; then what failed, without the
	# goroutine dumps a timeout prints.
	say "package times (longest first):"
	grep -aE '^(ok|FAIL)[[:space:]]+[^[:space:]]+[[:space:]]+[0-9.]+s' "$test_log" |
		awk '{t=$3; sub(/s$/, "", t); printf "    %8.1fs  %-4s %s\n", t, $1, $2}' | sort -rn | head -15 || true
	if grep -aqE '^(FAIL|--- FAIL|panic: test timed out)' "$test_log"; then
		say "failed:"
		grep -aE '^FAIL[[:space:]]+[^[:space:]]+' "$test_log" | sed 's/^/    /' || true
		grep -aE '^[[:space:]]*--- FAIL: ' "$test_log" | head -20 | sed 's/^/    /' || true
		grep -aE -A4 '^panic: test timed out' "$test_log" | head -8 | sed 's/^/    /' || true
	fi
}
summary
if [[ -s $ends_file ]]; then
	say "ended after go test started: $(cat "$ends_file")"
fi
if shares=$(share_summary) && [[ -n $shares ]]; then
	say "CPU share of a runnable thread during the tests: $shares"
fi
rm -f "$test_log" "$head_log" "$ends_file" "$starve_log"
if ((status == 0)); then
	say "PASS"
elif [[ -s $starved_file ]]; then
	cat "$starved_file" >&2
	rm -f "$starved_file"
	say "FAIL: the machine was starved (see above), not necessarily the tests"
else
	say "FAIL (go test exit status $status)"
fi
exit "$status"
