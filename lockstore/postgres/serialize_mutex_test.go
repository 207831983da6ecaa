package postgres

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/claimbus/claimbus/lockstore"
)

func TestKeyedMutexExcludesPerKey(t *testing.T) {
	t.Parallel()
	m := newKeyedMutex()
	ids := []serialKey{{id: LockID{1, 1}}, {id: LockID{1, 2}}, {id: LockID{2, 1}}}
	var inside [3]atomic.Int32
	var counts [3]int // guarded by the mutex of their id
	const goroutines, rounds = 64, 200
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			for r := range rounds {
				i := (g + r) % len(ids)
				e, err := m.lock(context.Background(), nil, ids[i])
				if err != nil {
					t.Error(err)
					return
				}
				if inside[i].Add(1) != 1 {
					t.Error("two holders of one id")
				}
				counts[i]++
				inside[i].Add(-1)
				m.unlock(ids[i], e)
			}
		})
	}
	wg.Wait()
	require.Equal(t, goroutines*rounds, counts[0]+counts[1]+counts[2])
	require.Empty(t, m.entries, "entries outlived their last holder")
}

func TestKeyedMutexWaitEnds(t *testing.T) {
	t.Parallel()
	m := newKeyedMutex()
	id := serialKey{id: LockID{7, 7}}
	held, err := m.lock(context.Background(), nil, id)
	require.NoError(t, err)

	ctx, cancel := context.WithCancel(context.Background())
	errs := make(chan error, 1)
	go func() {
		_, err := m.lock(ctx, nil, id)
		errs <- err
	}()
	serialWaitUntil(t, "the waiter is queued", func() bool { return m.queued(id) == 2 })
	cancel()
	require.ErrorIs(t, <-errs, context.Canceled)
	require.Equal(t, 1, m.queued(id), "a cancelled waiter left a trace")

	closed := make(chan struct{})
	go func() {
		_, err := m.lock(context.Background(), closed, id)
		errs <- err
	}()
	serialWaitUntil(t, "the waiter is queued", func() bool { return m.queued(id) == 2 })
	close(closed)
	require.ErrorIs(t, <-errs, lockstore.ErrClosed)

	_, err = m.lock(ctx, nil, id)
	require.ErrorIs(t, err, context.Canceled, "a done ctx fails at once, even before waiting")
	m.unlock(id, held)
	require.Zero(t, m.queued(id))
	require.Empty(t, m.entries)
}
