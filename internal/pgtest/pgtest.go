package pgtest

import (
	"bytes"
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/url"
	"os"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/goleak"
)

// shared is the server the databases of DSN and Pool live on: the one
// TEST_DATABASE_URL names, or a throwaway cluster started on first use.
var shared struct {
	once sync.Once
	url  string  // URL of a maintenance database on the server
	srv  *server // nil when TEST_DATABASE_URL is used
	err  error
}

// sharedURL returns the URL of the shared server, starting it on first use.
func sharedURL(t testing.TB) string {
	t.Helper()
	shared.once.Do(startShared)
	if shared.err != nil {
		skipOrFail(t, shared.err)
	}
	return shared.url
}

// startShared finds the shared server: the one TEST_DATABASE_URL names, or
// a throwaway cluster it starts.
func startShared() {
	if u := os.Getenv("TEST_DATABASE_URL"); u != "" {
		shared.url = u
		if _, err := url.Parse(u); err != nil || !strings.HasPrefix(u, "postgres") {
			shared.err = fmt.Errorf("TEST_DATABASE_URL must be a postgres:// URL, got %q", u)
		}
		return
	}
	shared.srv, shared.err = newServer(context.Background(), nil)
	if shared.err == nil {
		shared.url = shared.srv.dsn("postgres")
	}
}

// stopShared stops the throwaway cluster, if one was started, and removes
// its directory.
func stopShared() error {
	if shared.srv == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return shared.srv.destroy(ctx)
}

// Main runs the tests of a package with goleak.VerifyTestMain and stops the
// throwaway cluster, if one was started, after the tests and before the
// leak check. Call it from TestMain:
//
//	func TestMain(m *testing.M) { pgtest.Main(m) }
func Main(m *testing.M, opts ...goleak.Option) {
	goleak.VerifyTestMain(mainRunner{m}, opts...)
}

type mainRunner struct{ m *testing.M }

func (r mainRunner) Run() int {
	code := r.m.Run()
	waitPgxCleanup()
	if err := stopShared(); err != nil {
		fmt.Fprintln(os.Stderr, "pgtest: stop the throwaway cluster:", err)
		if code == 0 {
			code = 1
		}
	}
	return code
}

// DSN creates a fresh, empty database for t on the shared server and returns
// its connection string (a postgres:// URL, superuser). The database is
// dropped when t ends (WITH (FORCE), so connections left open do not block
// the drop).
func DSN(t testing.TB) string {
	t.Helper()
	base := sharedURL(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	dsn, drop, err := newDatabase(ctx, base, databaseName(t.Name()))
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	t.Cleanup(func() {
		if err := drop(); err != nil {
			t.Errorf("pgtest: %v", err)
		}
	})
	return dsn
}

// ExampleDatabase is DSN for a testable example, which has no testing.TB:
// it creates a fresh database named after example on the shared server
// (starting it on first use, in a package whose TestMain is Main) and
// returns its connection string and the func that drops it. Without server
// binaries it fails, as DSN does in CI.
func ExampleDatabase(ctx context.Context, example string) (dsn string, drop func() error, err error) {
	shared.once.Do(startShared)
	if shared.err != nil {
		return "", nil, fmt.Errorf("pgtest: %w: %s", shared.err, installHint)
	}
	return newDatabase(ctx, shared.url, databaseName(example))
}

// newDatabase creates the database name on the server base names, and
// returns its URL and the func that drops it.
func newDatabase(ctx context.Context, base, name string) (string, func() error, error) {
	u, err := url.Parse(base)
	if err != nil {
		return "", nil, err
	}
	u.Path = "/" + name
	if err := adminExec(ctx, base, "CREATE DATABASE "+name); err != nil {
		return "", nil, fmt.Errorf("create database: %w", err)
	}
	drop := func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := adminExec(ctx, base, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)"); err != nil {
			return fmt.Errorf("drop database %s: %w", name, err)
		}
		return nil
	}
	return u.String(), drop, nil
}

// adminExec runs one statement on a connection of its own.
func adminExec(ctx context.Context, dsn, sql string) error {
	c, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return err
	}
	defer func() { _ = c.Close(context.Background()) }()
	_, err = c.Exec(ctx, sql)
	return err
}

// databaseName is a unique, valid identifier naming a test's database: a
// prefix of the test's name, for whoever reads pg_database, and random
// bytes.
func databaseName(test string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(test) {
		if b.Len() == 30 {
			break
		}
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' {
			b.WriteRune(r)
		} else {
			b.WriteByte('_')
		}
	}
	var rnd [6]byte
	_, _ = rand.Read(rnd[:])
	return "pgtest_" + b.String() + "_" + hex.EncodeToString(rnd[:])
}

// PoolConfig tunes a pool opened by Pool or Connect.
type PoolConfig struct {
	// MaxConns caps the pool's connections. 0 keeps pgxpool's default (the
	// larger of 4 and the number of CPUs).
	MaxConns int32
	// ApplicationName is the application_name of every connection, as
	// pg_stat_activity shows it (use it to tell nodes apart, or to
	// terminate one node's backends). Default "pgtest".
	ApplicationName string
}

// Pool opens a pool on a fresh database (see DSN), closed when t ends.
func Pool(t testing.TB, cfg PoolConfig) *pgxpool.Pool {
	t.Helper()
	return Connect(t, DSN(t), cfg)
}

// Connect opens a pool on the database dsn names (one from DSN or
// Cluster.DSN: a second pool on the same database is a second node), pings
// it, and closes it when t ends.
func Connect(t testing.TB, dsn string, cfg PoolConfig) *pgxpool.Pool {
	t.Helper()
	pc, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	if cfg.MaxConns > 0 {
		pc.MaxConns = cfg.MaxConns
	}
	pc.ConnConfig.RuntimeParams["application_name"] = cmp.Or(cfg.ApplicationName, "pgtest")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	t.Cleanup(pool.Close)
	if err := pool.Ping(ctx); err != nil {
		t.Fatalf("pgtest: ping: %v", err)
	}
	return pool
}

// TerminateBackends runs pg_terminate_backend on every other backend of
// dsn's database whose application_name is applicationName, waits until
// they are gone, and returns how many there were. The connection string
// must be a superuser's (those of DSN and Cluster.DSN are).
func TerminateBackends(ctx context.Context, dsn, applicationName string) (int, error) {
	return terminate(ctx, dsn, applicationName, true)
}

func terminate(ctx context.Context, dsn, applicationName string, thisDatabase bool) (int, error) {
	c, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return 0, fmt.Errorf("pgtest: %w", err)
	}
	defer func() { _ = c.Close(context.Background()) }()
	// The second argument makes pg_terminate_backend wait (up to 10 s)
	// until the backend has exited.
	var n int
	err = c.QueryRow(ctx, `
		SELECT count(*) FILTER (WHERE pg_terminate_backend(pid, 10000))
		FROM pg_stat_activity
		WHERE application_name = $1 AND pid <> pg_backend_pid()
		  AND (NOT $2 OR datname = current_database())`,
		applicationName, thisDatabase).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("pgtest: terminate backends: %w", err)
	}
	return n, nil
}

// pgxCleanup is the goroutine pgx starts to close a connection that was
// closed mid-query: it sends the server a cancel request and drains the
// connection, for at most 15 s (pgconn's own deadline).
const pgxCleanup = "pgconn.(*PgConn).asyncClose.func1"

// waitPgxCleanup waits, at most 16 s, until no goroutine of pgx's
// connection clean-up runs any more, so that the leak check after the tests
// does not count those pgx owns and ends by themselves (a test that cut a
// connection through a fault proxy leaves its cancel request waiting on a
// server that never answers until pgx's deadline).
func waitPgxCleanup() {
	deadline := time.Now().Add(16 * time.Second)
	buf := make([]byte, 1<<20)
	for time.Now().Before(deadline) {
		n := runtime.Stack(buf, true)
		if !bytes.Contains(buf[:n], []byte(pgxCleanup)) {
			return
		}
		time.Sleep(50 * time.Millisecond) //nolint:forbidigo // TestMain has no *testing.T to poll with, and goroutine stacks send no signal
	}
}
