// Package pgtest gives tests a real PostgreSQL: a fresh database per test on
// a shared server, and private clusters for fault tests.
//
// # The shared server
//
// DSN creates a database for one test and drops it when the test ends;
// Pool and Connect open pgxpool pools on it, closed when the test ends:
//
//	func TestMain(m *testing.M) { pgtest.Main(m) } // goleak + cluster teardown
//
//	func TestX(t *testing.T) {
//		pool := pgtest.Pool(t, pgtest.PoolConfig{MaxConns: 4, ApplicationName: "node-a"})
//		// a second node on the same database:
//		// pgtest.Connect(t, dsn, pgtest.PoolConfig{ApplicationName: "node-b"})
//	}
//
// The server is the one TEST_DATABASE_URL names (a postgres:// URL of a
// superuser; pgtest only creates and drops its own databases there). When
// it is unset, the first test that asks starts a throwaway cluster for the
// whole test binary, from the system's binaries ($PGTEST_BINDIR, the newest
// /usr/lib/postgresql/*/bin, or PATH): initdb into a temporary directory,
// run as the postgres user when the binary runs as root, listening on a
// free port of 127.0.0.1 with its unix socket in that directory, with
// durability off (fsync, synchronous_commit, full_page_writes) and 300
// connections. Main stops it and removes the directory after the tests. If
// the binary is killed instead, the server dies with it (Pdeathsig) and a
// small reaper process, which waits for the binary's end on a pipe, kills
// what is left and removes the directory.
//
// Without server binaries, tests that need the server are skipped with a
// message saying how to install them (apt-get install postgresql); when CI
// is "true" they fail instead.
//
// # Private clusters
//
// NewCluster starts a cluster that only the calling test uses, with
// Stop, Start, Restart, Crash, CrashRestart and TerminateBackends, removed
// when the test ends; NewClusterWith starts one with extra server settings,
// kept across restarts:
//
//	c := pgtest.NewClusterWith(t, pgtest.ClusterConfig{
//		Settings: map[string]string{"max_locks_per_transaction": "16"},
//	})
//	// ...
//	err := c.CrashRestart(ctx) // immediate shutdown, then crash recovery
//
// It always needs the local binaries. TerminateBackends (the package
// function) does the same on one database of the shared server.
//
// # PgBouncer
//
// StartPgBouncer starts a PgBouncer in front of a private cluster, in
// session, transaction or statement pool mode, and returns the URL through
// it; it is stopped when the test ends. Without the pgbouncer binary ($PATH
// or /usr/sbin) the test is skipped, or fails when CI is "true":
//
//	c := pgtest.NewCluster(t)
//	dsn := pgtest.StartPgBouncer(t, c, pgtest.PoolTransaction)
package pgtest
