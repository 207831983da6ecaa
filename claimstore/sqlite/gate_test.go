package sqlite_test

import (
	"context"
	"database/sql"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/claimbus/claimbus/claimstore"
	"github.com/claimbus/claimbus/claimstore/sqlite"
	"github.com/claimbus/claimbus/internal/sqlitegate"
	"github.com/claimbus/claimbus/internal/testwait"
	"github.com/claimbus/claimbus/lockstore"
	locksqlite "github.com/claimbus/claimbus/lockstore/sqlite"
)

// The claim store and the lock store on one handle queue their writes at
// one write gate, first come first served, in Go: a claim store's write
// behind a lock store's transaction waits there, not in SQLite's busy
// handler, and goes before a transaction that came after it.
func TestWritesShareTheLockStoresGate(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	db, locks, claims := storesOnOneDB(t)
	gate := sqlitegate.For(db)

	// A transaction of the lock store holds the gate.
	txn, _, err := locksqlite.Begin(ctx, locks, nil, time.Second)
	require.NoError(t, err)

	// First come first served: the claim store's write, then the lock
	// store's transaction that came after it.
	order := make(chan string, 2)
	go func() {
		_, _, err := claims.Reserve(ctx, lockstore.Key{Namespace: "gate", ID: "first"}, "o", time.Minute)
		if err != nil {
			order <- err.Error()
			return
		}
		order <- "claims"
	}()
	require.Eventually(t, func() bool { return gate.Waiting() == 1 }, 10*time.Second, time.Millisecond)
	go func() {
		t2, _, err := locksqlite.Begin(ctx, locks, nil, 10*time.Second)
		if err != nil {
			order <- err.Error()
			return
		}
		order <- "locks"
		_ = t2.Rollback()
	}()
	require.Eventually(t, func() bool { return gate.Waiting() == 2 }, 10*time.Second, time.Millisecond)
	require.NoError(t, txn.Rollback())
	require.Equal(t, "claims", testwait.Recv(t, order, 10*time.Second, "the first write"))
	require.Equal(t, "locks", testwait.Recv(t, order, 10*time.Second, "the second write"))
}

// storesOnOneDB returns a database handle with a lock store and a claim
// store on it, closed when the test ends.
func storesOnOneDB(t *testing.T) (*sql.DB, *locksqlite.Store, claimstore.Store) {
	t.Helper()
	db := openDB(t, testDSN(t))
	locks, err := locksqlite.New(t.Context(), db, locksqlite.Config{})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, locks.Close()) })
	return db, locks, newStore(t, db, sqlite.Config{})
}

// A write of the claim store inside a transaction of the lock store that
// holds the gate would wait for that transaction: it fails at once.
func TestWriteInsideTheGatesTransactionFails(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	_, locks, claims := storesOnOneDB(t)

	began := time.Now()
	err := locks.Serialize(ctx, lockstore.Key{Namespace: "gate", ID: "k"}, func(ctx context.Context, _ *sql.Tx) error {
		_, _, err := claims.Reserve(ctx, lockstore.Key{Namespace: "gate", ID: "v"}, "o", time.Minute)
		return err
	})
	require.ErrorIs(t, err, sqlitegate.ErrHeld)
	require.Less(t, time.Since(began), time.Second, "not the busy timeout (5s)")
}
