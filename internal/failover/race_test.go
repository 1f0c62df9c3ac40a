//go:build race

package failover

// raceEnabled: the test runs with -race, so the nodes are built with it too
// (the race-instrumented packages are then already in the build cache, and
// the nodes' data races are caught).
const raceEnabled = true
