package postgres

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/claimbus/claimbus/internal/keyqueue"
	"github.com/claimbus/claimbus/lockstore"
)

// The queue itself (exclusion, FIFO order, cancellation races) is tested
// in internal/keyqueue; these tests check what the store adds.

func TestTurnQueueWaitEnds(t *testing.T) {
	t.Parallel()
	q := newTurnQueue()
	id := LockID{7, 7}
	require.NoError(t, q.take(context.Background(), nil, id))

	ctx, cancel := context.WithCancel(context.Background())
	errs := make(chan error, 1)
	go func() { errs <- q.take(ctx, nil, id) }()
	waitFor(t, "the waiter is queued", func() bool { return q.waiting(id) == 1 })
	cancel()
	require.ErrorIs(t, <-errs, context.Canceled)
	require.Equal(t, 1, queuedWithHolder(q, id), "a cancelled waiter left a trace")

	closed := make(chan struct{})
	go func() { errs <- q.take(context.Background(), closed, id) }()
	waitFor(t, "the waiter is queued", func() bool { return q.waiting(id) == 1 })
	close(closed)
	require.ErrorIs(t, <-errs, lockstore.ErrClosed)
	require.Equal(t, 1, queuedWithHolder(q, id), "a waiter ended by close left a trace")

	q.pass(id)
	require.Zero(t, queuedWithHolder(q, id))
	require.Zero(t, q.q.Len())
}

// TestTurnQueueFreesIdleIDs: after a storm of distinct lock ids, held
// many at once, the queue keeps nothing (its maps used to keep their
// buckets for ever).
func TestTurnQueueFreesIdleIDs(t *testing.T) {
	t.Parallel()
	q := newTurnQueue()
	const n = 20000
	for i := range n {
		require.True(t, q.tryTake(LockID{3, int32(i)}))
	}
	require.Equal(t, n, q.q.Len())
	for i := range n {
		q.pass(LockID{3, int32(i)})
	}
	require.Zero(t, q.q.Len())
	require.LessOrEqual(t, q.q.Slots(), queueShards*keyqueue.MinSlots, "the shards gave their slots back")
}
