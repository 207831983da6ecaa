package sqlite_test

import (
	"context"
	"database/sql"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/claimbus/claimbus/lockstore"
	"github.com/claimbus/claimbus/lockstore/sqlite"
)

// TestBegin: a Txn holds its keys' locks until it ends, its ctx carries
// the transaction to TxFrom and to a nested Serialize, its effects run
// only once it commits, and a wait past the bound is a timeout.
func TestBegin(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	s, db := counterStore(t)
	keys := []lockstore.Key{key("b"), key("a"), key("b")}
	for _, commit := range []bool{true, false} {
		txn, tctx, err := sqlite.Begin(ctx, s, keys, time.Second)
		require.NoError(t, err)
		tx, ok := sqlite.TxFrom(tctx)
		require.True(t, ok)
		require.Same(t, txn.Tx(), tx)
		_, _, err = sqlite.Begin(tctx, s, keys, time.Second)
		require.ErrorContains(t, err, "nest with Serialize")
		_, err = sqlite.SerializeValue(tctx, s, key("a"), func(ctx context.Context, tx *sql.Tx) (int, error) {
			return increment(ctx, tx, "a")
		})
		require.NoError(t, err)
		held, err := s.Held(ctx)
		require.NoError(t, err)
		require.Len(t, held, 2, "a and b, once each")
		_, _, err = sqlite.Begin(ctx, s, []lockstore.Key{key("b")}, 50*time.Millisecond)
		require.ErrorIs(t, err, lockstore.ErrTimeout)
		ran := false
		lockstore.AfterCommit(tctx, func() { ran = true })
		if commit {
			require.NoError(t, txn.Commit())
		} else {
			require.NoError(t, txn.Rollback())
		}
		require.Equal(t, commit, ran)
		require.NoError(t, txn.Rollback(), "a no-op once ended")
		require.Equal(t, 1, count(t, db, "a"))
		held, err = s.Held(ctx)
		require.NoError(t, err)
		require.Empty(t, held)
	}
	_, ok := sqlite.TxFrom(ctx)
	require.False(t, ok)

	// A lock the store ends before the commit rolls it back.
	txn, tctx, err := sqlite.Begin(ctx, s, keys, time.Second)
	require.NoError(t, err)
	_, err = increment(tctx, txn.Tx(), "a")
	require.NoError(t, err)
	require.NoError(t, s.Reset(ctx))
	require.ErrorIs(t, txn.Commit(), lockstore.ErrLockLost)
	require.Equal(t, 1, count(t, db, "a"))
}

// Begin without keys takes the write gate alone: the transactions of the
// store take turns with it, and one whose turn does not come within its
// wait gets a timeout.
func TestBeginWithoutKeys(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	s, db := counterStore(t)
	txn, tctx, err := sqlite.Begin(ctx, s, nil, time.Second)
	require.NoError(t, err)
	_, err = increment(tctx, txn.Tx(), "a")
	require.NoError(t, err)

	_, _, err = sqlite.Begin(ctx, s, nil, 50*time.Millisecond)
	require.ErrorIs(t, err, lockstore.ErrTimeout)
	require.ErrorContains(t, err, "write gate")
	dctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	_, err = sqlite.SerializeValue(dctx, s, key("b"), func(ctx context.Context, tx *sql.Tx) (int, error) {
		return increment(ctx, tx, "b")
	})
	require.ErrorIs(t, err, context.DeadlineExceeded, "Serialize waits for the gate too")

	require.NoError(t, txn.Commit())
	txn, _, err = sqlite.Begin(ctx, s, nil, 50*time.Millisecond)
	require.NoError(t, err)
	require.NoError(t, txn.Rollback())
	require.Equal(t, 1, count(t, db, "a"))
	require.Zero(t, count(t, db, "b"))
}
