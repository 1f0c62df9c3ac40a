// Package model holds a Promela model of sqlease's lease, acting gate,
// fencing, advisory takeover and deferred retry (lease.pml) and the tests
// that check it with the spin model checker: the model as the code is has no
// errors, each planted defect is refuted with a counterexample, and the
// model's constants are the election package's defaults. README.md maps the
// model to the code. The package has no Go API.
package model
