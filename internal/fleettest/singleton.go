package fleettest

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"

	"github.com/sqlease/sqlease/action"
)

// CounterScript is a daemon singleton written in bash (no Go, no curl): it
// resumes from $SQLEASE_STATE, counts, and saves every count through its
// node's API under its epoch with its run's token; it exits when the node
// answers 409 (its epoch is over). It appends its pid to $PIDS and, when
// $SAVES is set, a line "<epoch> <holder> <count>" to $SAVES after every
// save the node accepted.
const CounterScript = `#!/usr/bin/env bash
echo $$ >> "$PIDS"
n=$(printf '%s' "$SQLEASE_STATE" | sed -n 's/.*"n":\([0-9]*\).*/\1/p')
n=${n:-0}
hostport=${SQLEASE_API#http://}
host=${hostport%:*}
port=${hostport##*:}
while :; do
	n=$((n + 1))
	body="{\"n\":$n}"
	exec 3<>"/dev/tcp/$host/$port" || exit 1
	printf 'PUT /v1/singletons/%s/state HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer %s\r\nSqlease-Epoch: %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s' \
		"$SQLEASE_SINGLETON" "$hostport" "$SQLEASE_SINGLETON_TOKEN" "$SQLEASE_EPOCH" ${#body} "$body" >&3
	IFS= read -r status <&3
	exec 3<&-
	case $status in
	*" 204"*) [ -n "$SAVES" ] && echo "$SQLEASE_EPOCH $SQLEASE_HOLDER $n" >> "$SAVES" ;;
	*" 409"*) exit 0 ;;
	*) echo "counter: $status" >&2; exit 1 ;;
	esac
	sleep 0.05
done
`

// Alive reports whether pid runs: it exists and is not a zombie (a killed
// node's child is reaped by whoever adopts it, maybe late).
func Alive(pid int) bool {
	if syscall.Kill(pid, 0) != nil {
		return false
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// pid (comm) state …: the state follows the last ')'.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || i+2 >= len(s) || s[i+2] != 'Z'
}

// GuardOf returns the pid of the exec guard the node with pid node runs,
// or 0 when it runs none.
func GuardOf(node int) int {
	dirs, _ := os.ReadDir("/proc")
	for _, d := range dirs {
		pid, err := strconv.Atoi(d.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			continue
		}
		// pid (comm) state ppid …
		s := string(b)
		f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
		if len(f) < 2 || f[1] != strconv.Itoa(node) {
			continue
		}
		if argv, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid)); strings.Contains(string(argv), "\x00"+action.GuardArg) {
			return pid
		}
	}
	return 0
}

// PIDs reads the pids CounterScript processes appended to file.
func PIDs(file string) []int {
	b, _ := os.ReadFile(file)
	var out []int
	for _, line := range strings.Fields(string(b)) {
		if pid, err := strconv.Atoi(line); err == nil {
			out = append(out, pid)
		}
	}
	return out
}

// AlivePIDs returns the pids of file that are alive.
func AlivePIDs(file string) []int {
	var out []int
	for _, pid := range PIDs(file) {
		if Alive(pid) {
			out = append(out, pid)
		}
	}
	return out
}

// Save is one save a node accepted, as CounterScript logs it.
type Save struct {
	Epoch  int64
	Holder string
	N      int
}

// Saves reads the saves CounterScript appended to file, in order.
func Saves(file string) []Save {
	b, _ := os.ReadFile(file)
	var out []Save
	lines := strings.Split(string(b), "\n")
	for _, line := range lines[:len(lines)-1] { // the last one is being written, or empty
		f := strings.Fields(line)
		if len(f) != 3 {
			continue
		}
		e, err1 := strconv.ParseInt(f[0], 10, 64)
		n, err2 := strconv.Atoi(f[2])
		if err1 == nil && err2 == nil {
			out = append(out, Save{Epoch: e, Holder: f[1], N: n})
		}
	}
	return out
}
