package sqlite_test

import (
	"context"
	"database/sql"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/claimbus/claimbus/claimstore"
	"github.com/claimbus/claimbus/claimstore/claimstoretest"
	"github.com/claimbus/claimbus/claimstore/sqlite"
	"github.com/claimbus/claimbus/lockstore"
	locksqlite "github.com/claimbus/claimbus/lockstore/sqlite"
)

// openDB opens dsn, closed when t ends.
func openDB(t testing.TB, dsn string) *sql.DB {
	t.Helper()
	db, err := sql.Open("sqlite", dsn)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, db.Close()) })
	return db
}

// testDSN is lockstore/sqlite.DSN for a file in t's temporary directory,
// with the commit fsync of WAL mode relaxed so that the tests measure the
// store, not the disk.
func testDSN(t testing.TB) string {
	return locksqlite.DSN(filepath.Join(t.TempDir(), "claims.db"), 5*time.Second) + "&_synchronous=NORMAL"
}

func newStore(t testing.TB, db *sql.DB, cfg sqlite.Config) claimstore.Store {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := sqlite.New(ctx, db, cfg)
	require.NoError(t, err)
	return s
}

// The stores of the suite share one database file through two handles,
// so that writes of separate stores meet in SQLite's busy handler.
func TestConformance(t *testing.T) {
	t.Parallel()
	dsn := testDSN(t)
	dbs := []*sql.DB{openDB(t, dsn), openDB(t, dsn)}
	var n atomic.Int64
	claimstoretest.Run(t, func(t *testing.T) claimstore.Store {
		return newStore(t, dbs[n.Add(1)%2], sqlite.Config{})
	})
}

func TestUnsuitableDB(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	db := openDB(t, "file:"+filepath.Join(t.TempDir(), "x.db"))
	_, err := sqlite.New(ctx, db, sqlite.Config{})
	require.ErrorIs(t, err, sqlite.ErrUnsuitableDB, "no busy timeout")
	_, err = sqlite.New(ctx, nil, sqlite.Config{})
	require.Error(t, err)
}

// Ages and retention follow the store's clock.
func TestInjectedClock(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	now := time.Unix(1_000_000, 0)
	s := newStore(t, openDB(t, testDSN(t)), sqlite.Config{Now: func() time.Time { return now }})
	k := lockstore.Key{Namespace: "clock", ID: "v"}
	_, ok, err := s.Reserve(ctx, k, "first", time.Minute)
	require.NoError(t, err)
	require.True(t, ok)
	now = now.Add(59 * time.Second)
	held, ok, err := s.Reserve(ctx, k, "second", time.Minute)
	require.NoError(t, err)
	require.False(t, ok, "59s old, younger than maxLag")
	require.Equal(t, 59*time.Second, held.Age)
	now = now.Add(time.Second)
	_, ok, err = s.Reserve(ctx, k, "second", time.Minute)
	require.NoError(t, err)
	require.True(t, ok, "a minute old: handed over")

	require.NoError(t, s.SaveOutcome(ctx, k, claimstore.Outcome{Fingerprint: []byte{1}}, time.Hour))
	now = now.Add(time.Hour - time.Nanosecond)
	_, found, err := s.Outcome(ctx, k)
	require.NoError(t, err)
	require.True(t, found, "within retention")
	now = now.Add(time.Nanosecond)
	_, found, err = s.Outcome(ctx, k)
	require.NoError(t, err)
	require.False(t, found, "retention passed")
	purged, err := s.PurgeOutcomes(ctx, 10)
	require.NoError(t, err)
	require.Equal(t, 1, purged)
}
