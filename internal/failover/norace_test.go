//go:build !race

package failover

const raceEnabled = false
