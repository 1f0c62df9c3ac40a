//go:build !linux

package action

import (
	"fmt"
	"os"
	"os/exec"
	"time"
)

// guard needs Linux: without the parent-death signal a guard could outlive
// its node and kill process groups whose ids were reused.
func guard(<-chan guardMsg) int {
	fmt.Fprintf(os.Stderr, "%s: exec guards need Linux\n", GuardArg)
	return 2
}

func startGuard(func() (time.Time, bool), *exec.Cmd) (func(), error) { return func() {}, nil }
