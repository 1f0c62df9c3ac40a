//go:build race

package readme

// raceBuild: the tests run with -race, so the quick start builds with it
// too and reuses the dependencies the test build compiled (a cold build of
// the drivers without it took minutes on a busy 2-core machine).
const raceBuild = true
