// Package pgtest gives tests a real PostgreSQL: a fresh database per test on
// a shared server, and private clusters for fault tests.
//
//	func TestMain(m *testing.M) { pgtest.Main(m) } // goleak + cluster teardown
//
//	func TestX(t *testing.T) {
//		pool := pgtest.Pool(t, pgtest.PoolConfig{MaxConns: 4, ApplicationName: "node-a"})
//	}
//
// The server is the one TEST_DATABASE_URL names; when it is unset, a
// throwaway cluster starts from the system's binaries for the whole test
// binary. Without binaries the tests that need a server are skipped, or
// fail when CI is "true". NewCluster, NewClusterWith and StartPgBouncer give
// one test a cluster (or a PgBouncer in front of it) of its own.
//
// docs/testing.md#internalpgtest describes the shared server, private
// clusters and PgBouncer.
package pgtest
