package cli

// Get is get (routes_test.go) for the package's external tests.
var Get = get
