//go:build !linux

package action

import (
	"context"
	"fmt"
	"os"
	"os/exec"
)

// guard needs Linux: without the parent-death signal a guard could outlive
// its node and kill process groups whose ids were reused.
func guard(<-chan guardMsg) int {
	fmt.Fprintf(os.Stderr, "%s: exec guards need Linux\n", GuardArg)
	return 2
}

func startGuard(context.Context, *exec.Cmd) (func(), error) { return func() {}, nil }
