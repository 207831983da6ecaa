// Package e2e holds the end-to-end tests of claimbus: several nodes of the
// example service (example_app) on one PostgreSQL database, in one process
// and as separate processes, under storms of duplicate commands and with a
// node killed while it holds a claim; their commands go in process, through
// PostgreSQL (bus/sqltransport) or through NATS JetStream
// (bus/natstransport, on a NATS server the tests run in process). It has
// no code outside its tests.
//
// Run them with a PostgreSQL server at hand (see internal/pgtest):
//
//	go test -race ./test/
package e2e
