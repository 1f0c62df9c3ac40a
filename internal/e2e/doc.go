// Package e2e holds end-to-end tests of the sqlease daemon: TestMain builds
// cmd/sqlease once, and the tests run fleets of real "sqlease serve"
// processes on one PostgreSQL database ($SQLEASE_TEST_POSTGRES_URL, else a
// private server from internal/pgtest) or one SQLite file, and talk to them
// only as API.md promises: command line, exit status, HTTP.
//
// Set SQLEASE_E2E_RACE=1 to build the daemon with the race detector.
package e2e
