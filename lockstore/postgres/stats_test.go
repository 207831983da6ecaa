package postgres

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/stretchr/testify/require"

	"github.com/claimbus/claimbus/internal/pgtest"
	"github.com/claimbus/claimbus/lockstore"
)

// TestStats follows a store's counts through grants, a waiter of this node
// and the releases.
func TestStats(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	s := newTestStore(t, pgtest.Connect(t, pgtest.DSN(t), pgtest.PoolConfig{MaxConns: 2}), Config{})
	require.Zero(t, s.Stats().Held)

	k := lockstore.Key{Namespace: "stats", ID: "a"}
	l, err := s.TryLock(ctx, k)
	require.NoError(t, err)
	l2, err := s.TryLock(ctx, lockstore.Key{Namespace: "stats", ID: "b"})
	require.NoError(t, err)
	granted := make(chan error, 1)
	go func() {
		w, err := s.Lock(ctx, k)
		if err == nil {
			err = w.Release(ctx)
		}
		granted <- err
	}()
	waitFor(t, "a waiter", func() bool { return s.Stats().Waiting == 1 })
	st := s.Stats()
	require.EqualValues(t, 2, st.Held)
	require.GreaterOrEqual(t, st.RoundTrips, int64(1))
	require.GreaterOrEqual(t, st.BatchedRequests, int64(2), "two try-locks, in one round trip or two")
	require.GreaterOrEqual(t, st.Conns, int64(1), "the grants came on a connected lock connection")
	require.LessOrEqual(t, st.Conns, int64(2), "a pool of 2 gives at most 2 lock connections")

	require.NoError(t, l.Release(ctx))
	require.NoError(t, <-granted)
	require.NoError(t, l2.Release(ctx))
	st = s.Stats()
	require.Zero(t, st.Held)
	require.Zero(t, st.Waiting)
	require.Zero(t, st.LocksLost)
	require.EqualValues(t, 6, st.BatchedRequests, "three locks and three unlocks")
}

// TestStatsCountsTurnWaiters counts a Serialize call queued on this node
// behind another for the same key.
func TestStatsCountsTurnWaiters(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	s := newTestStore(t, pgtest.Connect(t, pgtest.DSN(t), pgtest.PoolConfig{MaxConns: 4}), Config{})
	k := lockstore.Key{Namespace: "stats", ID: "turn"}
	inside, leave := make(chan struct{}), make(chan struct{})
	done := make(chan error, 2)
	go func() {
		done <- s.Serialize(ctx, k, func(context.Context, pgx.Tx) error {
			close(inside)
			<-leave
			return nil
		})
	}()
	<-inside
	go func() { done <- s.Serialize(ctx, k, func(context.Context, pgx.Tx) error { return nil }) }()
	waitFor(t, "a Serialize call waiting for its turn", func() bool { return s.Stats().Waiting == 1 })
	close(leave)
	require.NoError(t, <-done)
	require.NoError(t, <-done)
	require.Zero(t, s.Stats().Waiting)
}
