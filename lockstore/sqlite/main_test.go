package sqlite_test

import (
	"context"
	"database/sql"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/claimbus/claimbus/lockstore/sqlite"
)

func TestMain(m *testing.M) {
	if path := os.Getenv(helperEnv); path != "" {
		os.Exit(helperProcess(path))
	}
	goleak.VerifyTestMain(m)
}

// testDSN is the DSN the tests open databases with: sqlite.DSN, with the
// commit fsync of WAL mode relaxed so that the tests measure the store,
// not the disk.
func testDSN(path string, busyTimeout time.Duration) string {
	return sqlite.DSN(path, busyTimeout) + "&_synchronous=NORMAL"
}

// openDB opens the database file at path with dsn, closed when t ends.
func openDB(t testing.TB, dsn string) *sql.DB {
	t.Helper()
	db, err := sql.Open("sqlite", dsn)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, db.Close()) })
	require.NoError(t, db.Ping())
	return db
}

// newDB opens a fresh database file in t's temporary directory.
func newDB(t testing.TB) (*sql.DB, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "claimbus.db")
	return openDB(t, testDSN(path, 5*time.Second)), path
}

// newStore makes a store on db, closed when t ends.
func newStore(t testing.TB, db *sql.DB, cfg sqlite.Config) *sqlite.Store {
	t.Helper()
	s, err := sqlite.New(context.Background(), db, cfg)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, s.Close()) })
	return s
}

// ctxT is a context bounding one test.
func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}
