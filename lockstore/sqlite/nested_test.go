package sqlite_test

import (
	"context"
	"database/sql"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/claimbus/claimbus/lockstore"
	"github.com/claimbus/claimbus/lockstore/sqlite"
)

// A nested Serialize whose fn fails rolls back to its savepoint: its rows
// and the effects registered inside it are gone, whatever the outer fn
// then does, and the outer transaction commits its own.
func TestSerializeNestedErrorRollsBackToItsSavepoint(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	s, db := counterStore(t)
	boom := errors.New("inner fails")
	var ran []string
	effect := func(what string) func() { return func() { ran = append(ran, what) } }

	_, err := sqlite.Serialize(ctx, s, key("outer"), func(ctx context.Context, tx *sql.Tx) (int, error) {
		_, err := increment(ctx, tx, "outer")
		require.NoError(t, err)
		lockstore.AfterCommit(ctx, effect("outer"))

		_, err = sqlite.Serialize(ctx, s, key("inner"), func(ctx context.Context, tx *sql.Tx) (int, error) {
			_, err := increment(ctx, tx, "inner")
			require.NoError(t, err)
			lockstore.AfterCommit(ctx, effect("inner"))
			// A deeper call succeeds, inside the one that fails: it goes
			// with it.
			_, err = sqlite.Serialize(ctx, s, key("deep"), func(ctx context.Context, tx *sql.Tx) (int, error) {
				lockstore.AfterCommit(ctx, effect("deep"))
				return increment(ctx, tx, "deep")
			})
			require.NoError(t, err)
			return 0, boom
		})
		require.ErrorIs(t, err, boom)

		// Exclusive inside a transaction is Serialize: its savepoint too.
		_, err = sqlite.Exclusive(ctx, s, key("outer"), func(ctx context.Context, q sqlite.Querier) (int, error) {
			_, err := increment(ctx, q, "outer")
			require.NoError(t, err)
			lockstore.AfterCommit(ctx, effect("exclusive"))
			return 0, boom
		})
		require.ErrorIs(t, err, boom)

		// A panic, recovered by the outer fn.
		func() {
			defer func() { require.Equal(t, "inner panics", recover()) }()
			_, _ = sqlite.Serialize(ctx, s, key("inner"), func(ctx context.Context, tx *sql.Tx) (int, error) {
				_, err := increment(ctx, tx, "inner")
				require.NoError(t, err)
				lockstore.AfterCommit(ctx, effect("panicked"))
				panic("inner panics")
			})
		}()

		_, err = sqlite.Serialize(ctx, s, key("inner"), func(ctx context.Context, tx *sql.Tx) (int, error) {
			lockstore.AfterCommit(ctx, effect("later"))
			return increment(ctx, tx, "later")
		})
		require.NoError(t, err)
		// The transaction sees none of the failed calls' writes.
		var n int
		require.NoError(t, tx.QueryRowContext(ctx, "SELECT count(*) FROM counter WHERE name IN ('inner', 'deep')").Scan(&n))
		require.Zero(t, n)
		require.NoError(t, tx.QueryRowContext(ctx, "SELECT n FROM counter WHERE name = 'outer'").Scan(&n))
		require.Equal(t, 1, n)
		return 0, nil // the inner errors are swallowed
	})
	require.NoError(t, err)
	require.Equal(t, []string{"outer", "later"}, ran)
	require.Equal(t, 1, count(t, db, "outer"))
	require.Zero(t, count(t, db, "inner"), "the failed inner call's rows committed")
	require.Zero(t, count(t, db, "deep"))
	require.Equal(t, 1, count(t, db, "later"))
}
