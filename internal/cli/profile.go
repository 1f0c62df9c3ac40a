package cli

import (
	"fmt"
	"os"
	"runtime/pprof"
)

// cpuProfileEnv names a file to which `sqlease serve` writes a CPU profile
// of its whole life (go tool pprof reads it): how sqlease-bench -bench
// daemon profiles the node it measures (SQLEASE_BENCH_NODE_PROFILE). It is
// no configuration of the node, so it has no flag.
const cpuProfileEnv = "SQLEASE_CPU_PROFILE"

// startCPUProfile starts a CPU profile into path; stop ends it and closes
// the file.
func startCPUProfile(path string) (stop func(), err error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", cpuProfileEnv, err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("%s: %w", cpuProfileEnv, err)
	}
	return func() { pprof.StopCPUProfile(); f.Close() }, nil
}
