package sqlite_test

import (
	"context"
	"database/sql"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/claimbus/claimbus/lockstore/lockstoretest"
	"github.com/claimbus/claimbus/lockstore/sqlite"
)

// TestTxLockerConformance runs the lockstore.TxLocker suite on a store of
// a fresh database file per subtest. The store ends a held lock with
// Reset. A database file has one store (see New), which is its own Peer.
func TestTxLockerConformance(t *testing.T) {
	t.Parallel()
	lockstoretest.RunTx(t, func(t *testing.T) lockstoretest.TxStore[*sql.Tx, sqlite.Querier] {
		db, _ := newDB(t)
		_, err := db.Exec("CREATE TABLE marker (name TEXT PRIMARY KEY)")
		require.NoError(t, err)
		s := newStore(t, db, sqlite.Config{})
		write := func(ctx context.Context, q sqlite.Querier, name string) error {
			_, err := q.ExecContext(ctx, "INSERT INTO marker (name) VALUES (?)", name)
			return err
		}
		seen := func(ctx context.Context, q sqlite.Querier, name string) (bool, error) {
			var ok bool
			err := q.QueryRowContext(ctx, "SELECT EXISTS (SELECT 1 FROM marker WHERE name = ?)", name).Scan(&ok)
			return ok, err
		}
		return lockstoretest.TxStore[*sql.Tx, sqlite.Querier]{
			Locker:    s,
			Peer:      s, // one store per database file
			Close:     s.Close,
			Write:     func(ctx context.Context, tx *sql.Tx, name string) error { return write(ctx, tx, name) },
			WriteQ:    write,
			Seen:      func(ctx context.Context, tx *sql.Tx, name string) (bool, error) { return seen(ctx, tx, name) },
			Committed: func(ctx context.Context, name string) (bool, error) { return seen(ctx, db, name) },
			Begin:     func(ctx context.Context) (*sql.Tx, error) { return db.BeginTx(ctx, nil) },
			Commit:    func(_ context.Context, tx *sql.Tx) error { return tx.Commit() },
			Rollback:  func(_ context.Context, tx *sql.Tx) error { return tx.Rollback() },
			EndLock:   func(ctx context.Context, _ *sql.Tx) error { return s.Reset(ctx) },
		}
	})
}
