#!/usr/bin/env bash
# The project's one test command:
#
#   bash scripts/test.sh                       # gofmt, go vet, go test -race ./...
#   bash scripts/test.sh ./postgres/...        # go test only these packages
#   bash scripts/test.sh -run TestFoo ./sqlite # flags too (give packages as well)
#
# Arguments, when given, replace "./..." on the go test command line; they come
# after the defaults (-race -count=1 -timeout 12m), so e.g. -timeout 30m
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
# Exit status: that of go test, or 1 if gofmt, go vet or the server setup fails.
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

cleanup() {
	local status=$?
	trap - EXIT INT TERM HUP
	if [[ -n $pg_dir ]]; then
		say "stopping PostgreSQL and removing $pg_dir"
		if [[ -f $pg_dir/data/postmaster.pid ]]; then
			"${pg_run[@]}" "$PG_BIN/pg_ctl" stop -D "$pg_dir/data" -m immediate -s >/dev/null 2>&1 || true
		fi
		rm -rf "$pg_dir" || true
	fi
	# MariaDB: stop the throwaway MariaDB server and remove its directory here.
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

start_postgres() {
	local b
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
		if grep -q 'Address already in use' "$log" 2>/dev/null && ((attempt < 5)); then
			say "port $port was taken meanwhile; trying another"
			continue
		fi
		printf -- '--- PostgreSQL server log (%s) ---\n' "$log" >&2
		cat "$log" >&2 || true
		die "PostgreSQL did not start"
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

if [[ -n ${SQLEASE_TEST_POSTGRES_URL:-} ]]; then
	say "using the PostgreSQL server given by SQLEASE_TEST_POSTGRES_URL (starting none)"
else
	start_postgres
fi

# MariaDB: start a throwaway MariaDB here (unless the caller gave one) and
# export its DSN; stop it in cleanup above.

if (($# == 0)); then
	set -- ./...
fi
say "go test -race -count=1 -timeout 12m $*"
# go test runs in its own process group (set -m) in the background, so that a
# signal to this script alone is forwarded to it and the tests too, instead of
# waiting for the tests to finish. (stdin: a background job reading the
# terminal would be stopped.)
status=0
set -m
go test -race -count=1 -timeout 12m "$@" </dev/null &
test_pgid=$!
set +m
wait "$test_pgid" || status=$?
test_pgid=""
if ((status == 0)); then
	say "PASS"
else
	say "FAIL (go test exit status $status)"
fi
exit "$status"
