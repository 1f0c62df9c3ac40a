package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// byeScript is a daemon singleton (bash, no curl) that counts and saves
// every count; on SIGTERM it takes a moment to wind up and saves once more,
// marking the state with "bye":"<holder>@<epoch>". It appends to $OUT a
// line "start <singleton> <holder> <epoch> <state it was given>" when it
// starts, and "bye <singleton> <holder> <epoch> <HTTP status of the last
// save>" when it ends.
const byeScript = `#!/usr/bin/env bash
term=0
trap 'term=1' TERM
echo "start $SQLEASE_SINGLETON $SQLEASE_HOLDER $SQLEASE_EPOCH $SQLEASE_STATE" >> "$OUT"
n=$(printf '%s' "$SQLEASE_STATE" | sed -n 's/.*"n":\([0-9]*\).*/\1/p')
n=${n:-0}
hostport=${SQLEASE_API#http://}
host=${hostport%:*}
port=${hostport##*:}
save() {
	exec 3<>"/dev/tcp/$host/$port" || return 1
	printf 'PUT /v1/singletons/%s/state HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer %s\r\nSqlease-Epoch: %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s' \
		"$SQLEASE_SINGLETON" "$hostport" "$SQLEASE_SINGLETON_TOKEN" "$SQLEASE_EPOCH" ${#1} "$1" >&3
	IFS= read -r status <&3
	exec 3<&-
	set -- $status
	echo "$2"
}
while [ $term = 0 ]; do
	n=$((n + 1))
	case $(save "{\"n\":$n}") in
	409) exit 0 ;;
	esac
	sleep 0.05
done
sleep 0.3
st=$(save "{\"n\":$n,\"bye\":\"$SQLEASE_HOLDER@$SQLEASE_EPOCH\"}")
echo "bye $SQLEASE_SINGLETON $SQLEASE_HOLDER $SQLEASE_EPOCH $st" >> "$OUT"
exit 0
`

// byeLines reads the lines byeScript appended to out.
func byeLines(out string) [][]string {
	b, _ := os.ReadFile(out)
	var lines [][]string
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		if f := strings.Fields(l); len(f) >= 4 {
			lines = append(lines, f)
		}
	}
	return lines
}

// handedOver waits until the process of singleton name on holder from
// ended with its last save accepted (204), and another node's process
// started from that save. It returns the bye marker.
func handedOver(t *testing.T, out, name, from string) string {
	t.Helper()
	var marker string
	err := poll(30*time.Second, func() (bool, string) {
		lines := byeLines(out)
		marker = ""
		for _, l := range lines {
			if l[0] == "bye" && l[1] == name && l[2] == from {
				if len(l) < 5 || l[4] != "204" {
					t.Fatalf("the save %s@%s made after SIGTERM was refused: %v (lines %v)", from, l[3], l, lines)
				}
				marker = fmt.Sprintf(`"bye":"%s@%s"`, from, l[3])
			}
		}
		for _, l := range lines {
			if marker != "" && l[0] == "start" && l[1] == name && l[2] != from {
				if !strings.Contains(strings.Join(l[4:], " "), marker) {
					t.Fatalf("%s started %s from %v, not from the last save of %s (%s)", l[2], name, l[4:], from, marker)
				}
				return true, ""
			}
		}
		return false, fmt.Sprintf("lines %v", lines)
	})
	if err != nil {
		t.Fatal(err)
	}
	return marker
}

// A singleton process stopped on purpose — its node shut down, or its
// singleton handed to another node to even out the fleet — gets SIGTERM
// and its stop_timeout, and a save it makes then is accepted (the node
// keeps the lease until the process is gone): the next holder starts from
// it. Before, the node closed the gate before SIGTERM and that save was
// refused with 409 while the singleton still showed this node as holder.
func TestSingletonHandoverKeepsTheLastSave(t *testing.T) {
	dir := t.TempDir()
	script := filepath.Join(dir, "bye.sh")
	if err := os.WriteFile(script, []byte(byeScript), 0o755); err != nil {
		t.Fatal(err)
	}
	def := func(name, out string) []byte {
		return []byte(fmt.Sprintf(`{"name":%q,"command":["bash",%q],"env":{"OUT":%q},"initial_state":{"n":0},"heartbeat":"1m","stop_timeout":"5s"}`,
			name, script, out))
	}
	running := func(n *node, name string) singletonView {
		var v singletonView
		if err := poll(20*time.Second, func() (bool, string) {
			n.getJSON(t, "/v1/singletons/"+name, &v)
			return v.Status == "running" && v.count(t) >= 5, fmt.Sprintf("%+v", v)
		}); err != nil {
			t.Fatal(err)
		}
		return v
	}

	t.Run("shutdown", func(t *testing.T) {
		out := filepath.Join(t.TempDir(), "out")
		f := newFleet(t, sqliteDB(t))
		nodes := f.start("a", "b")
		if resp, body := nodes[0].do(t, "POST", "/v1/singletons", "", def("bye", out)); resp.StatusCode != 201 {
			t.Fatalf("create: %d %s", resp.StatusCode, body)
		}
		v := running(nodes[0], "bye")
		holder, other := nodes[0], nodes[1]
		if v.Holder == other.holder {
			holder, other = other, holder
		}
		holder.signal(t, syscall.SIGTERM)
		holder.wait(t, 20*time.Second)
		handedOver(t, out, "bye", holder.holder)
		running(other, "bye")
	})

	t.Run("rebalance", func(t *testing.T) {
		out := filepath.Join(t.TempDir(), "out")
		f := newFleet(t, sqliteDB(t))
		a := f.start("a")[0]
		for _, name := range []string{"s0", "s1"} {
			if resp, body := a.do(t, "POST", "/v1/singletons", "", def(name, out)); resp.StatusCode != 201 {
				t.Fatalf("create %s: %d %s", name, resp.StatusCode, body)
			}
		}
		running(a, "s0")
		running(a, "s1")
		f.start("b") // a holds two, its share is now one: it gives one back
		var moved string
		if err := poll(30*time.Second, func() (bool, string) {
			for _, l := range byeLines(out) {
				if l[0] == "bye" && l[2] == "a" {
					moved = l[1]
					return true, ""
				}
			}
			return false, fmt.Sprintf("lines %v", byeLines(out))
		}); err != nil {
			t.Fatal(err)
		}
		handedOver(t, out, moved, "a")
	})
}
