// Package e2e holds the end-to-end tests of claimbus: several nodes of the
// example service (example_app) on one PostgreSQL database, in one process
// and as separate processes, under storms of duplicate commands and with a
// node killed while it holds a claim. It has no code outside its tests.
//
// Run them with a PostgreSQL server at hand (see internal/pgtest):
//
//	go test -race ./test/
package e2e
