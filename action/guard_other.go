//go:build !linux

package action

import (
	"fmt"
	"os"
	"os/exec"
	"time"
)

// Exec guards are Linux only, like the parent-death signal of the
// commands they complement.
func guard(<-chan guardMsg) int {
	fmt.Fprintf(os.Stderr, "%s: exec guards need Linux\n", GuardArg)
	return 2
}

type guardWatch struct{}

func prepareGuard(func() (time.Time, bool)) (guardWatch, error) { return guardWatch{}, nil }

func (guardWatch) start(*exec.Cmd) (func(), error) { return func() {}, nil }
