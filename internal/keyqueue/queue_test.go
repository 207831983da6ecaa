package keyqueue

import (
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

const waitFor = 10 * time.Second

var errClosed = errors.New("closed")

type lockID struct{ ns, id int32 }

var seed = maphash.MakeSeed()

func hashID(id lockID) uint64 { return maphash.Comparable(seed, id) }

func newTestQueue() *Queue[lockID] { return NewQueue(16, hashID) }

func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	require.Eventually(t, cond, waitFor, time.Millisecond, what)
}

// requireEmpty checks that q keeps nothing: no key, and no more slots than
// an idle queue.
func requireEmpty(t *testing.T, q *Queue[lockID]) {
	t.Helper()
	require.Zero(t, q.Len(), "keys outlived their last turn")
	require.LessOrEqual(t, q.Slots(), len(q.shards)*MinSlots, "an idle queue gives its slots back")
	require.Zero(t, q.Waiters())
}

// TestQueueExcludesPerKey was the PostgreSQL store's
// TestTurnQueueExcludesPerKey.
func TestQueueExcludesPerKey(t *testing.T) {
	t.Parallel()
	q := newTestQueue()
	ids := []lockID{{1, 1}, {1, 2}, {2, 1}}
	var inside [3]atomic.Int32
	var counts [3]int // guarded by the turn of their id
	const goroutines, rounds = 64, 200
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			for r := range rounds {
				i := (g + r) % len(ids)
				if err := q.Take(context.Background(), nil, errClosed, ids[i]); err != nil {
					t.Error(err)
					return
				}
				if inside[i].Add(1) != 1 {
					t.Error("two holders of one id")
				}
				counts[i]++
				inside[i].Add(-1)
				q.Pass(ids[i])
			}
		})
	}
	wg.Wait()
	require.Equal(t, goroutines*rounds, counts[0]+counts[1]+counts[2])
	requireEmpty(t, q)
}

// TestQueueWaitEnds was the PostgreSQL store's TestTurnQueueWaitEnds.
func TestQueueWaitEnds(t *testing.T) {
	t.Parallel()
	q := newTestQueue()
	id := lockID{7, 7}
	require.NoError(t, q.Take(context.Background(), nil, errClosed, id))

	ctx, cancel := context.WithCancel(context.Background())
	errs := make(chan error, 1)
	go func() { errs <- q.Take(ctx, nil, errClosed, id) }()
	waitUntil(t, "the waiter is queued", func() bool { return q.Waiting(id) == 1 })
	cancel()
	require.ErrorIs(t, <-errs, context.Canceled)
	require.Equal(t, 1, q.Queued(id), "a cancelled waiter left a trace")

	closed := make(chan struct{})
	go func() { errs <- q.Take(context.Background(), closed, errClosed, id) }()
	waitUntil(t, "the waiter is queued", func() bool { return q.Waiting(id) == 1 })
	close(closed)
	require.ErrorIs(t, <-errs, errClosed)
	require.Equal(t, 1, q.Queued(id), "a waiter ended by close left a trace")

	q.Pass(id)
	require.Zero(t, q.Queued(id))
	requireEmpty(t, q)
}

func TestQueueTryTake(t *testing.T) {
	t.Parallel()
	q := newTestQueue()
	id := lockID{1, 1}
	require.True(t, q.TryTake(id))
	require.False(t, q.TryTake(id), "a held turn")
	require.True(t, q.TryTake(lockID{1, 2}), "another key")
	q.Pass(id)
	require.True(t, q.TryTake(id), "a passed turn with nobody waiting")
	q.Pass(id)
	q.Pass(lockID{1, 2})
	requireEmpty(t, q)
}

// TestQueueFIFO: waiters are handed the turn in the order they queued, one
// Pass each, the turn going straight to the first (TryTake never
// overtakes them).
func TestQueueFIFO(t *testing.T) {
	t.Parallel()
	q := newTestQueue()
	id := lockID{3, 3}
	require.True(t, q.TryTake(id))
	const n = 20
	granted := make(chan int, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			if err := q.Take(context.Background(), nil, errClosed, id); err != nil {
				t.Error(err)
				return
			}
			granted <- i
		})
		waitUntil(t, "the waiter is queued", func() bool { return q.Waiting(id) == i+1 })
	}
	for i := range n {
		q.Pass(id)
		select {
		case got := <-granted:
			require.Equal(t, i, got, "grant %d", i)
		case <-time.After(waitFor):
			t.Fatalf("grant %d never came", i)
		}
		require.False(t, q.TryTake(id), "TryTake overtook the queue at grant %d", i)
	}
	wg.Wait()
	q.Pass(id)
	requireEmpty(t, q)
}

// TestQueueCancellationRaces cancels waiters at random moments, racing the passes: a waiter whose Take fails never holds the turn (two holders would
// meet inside), and never swallows a grant (the last Pass frees the key:
// the queue ends empty, and every waiter that did not give up got in).
func TestQueueCancellationRaces(t *testing.T) {
	t.Parallel()
	q := newTestQueue()
	ids := []lockID{{1, 1}, {1, 2}}
	var inside [2]atomic.Int32
	var entered, gaveUp atomic.Int64
	const goroutines, rounds = 32, 300
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(g), 1))
			for r := range rounds {
				i := (g + r) % len(ids)
				ctx, cancel := context.WithCancel(context.Background())
				if rng.IntN(2) == 0 {
					go cancel() // races the grant
				}
				err := q.Take(ctx, nil, errClosed, ids[i])
				cancel()
				if err != nil {
					if !errors.Is(err, context.Canceled) {
						t.Error(err)
					}
					gaveUp.Add(1)
					continue
				}
				if inside[i].Add(1) != 1 {
					t.Error("two holders of one id")
				}
				entered.Add(1)
				inside[i].Add(-1)
				q.Pass(ids[i])
			}
		})
	}
	wg.Wait()
	require.Equal(t, int64(goroutines*rounds), entered.Load()+gaveUp.Load())
	require.Positive(t, entered.Load())
	requireEmpty(t, q)
}

// TestQueueFreesIdleKeys: after a storm of distinct keys, each held by
// several callers in turn, the queue holds nothing.
func TestQueueFreesIdleKeys(t *testing.T) {
	t.Parallel()
	q := newTestQueue()
	const keys, goroutines = 20000, 8
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			for k := range keys {
				id := lockID{int32(g % 2), int32(k)}
				if err := q.Take(context.Background(), nil, errClosed, id); err != nil {
					t.Error(err)
					return
				}
				q.Pass(id)
			}
		})
	}
	// Hold many keys at once, so the tables grow.
	for k := range keys {
		require.True(t, q.TryTake(lockID{9, int32(k)}), fmt.Sprint(k))
	}
	require.Equal(t, keys, countHeldIn(q, 9))
	require.Greater(t, q.Slots(), len(q.shards)*MinSlots)
	for k := range keys {
		q.Pass(lockID{9, int32(k)})
	}
	wg.Wait()
	requireEmpty(t, q)
}

// countHeldIn counts the keys of q in namespace ns.
func countHeldIn(q *Queue[lockID], ns int32) int {
	n := 0
	for i := range q.shards {
		sh := &q.shards[i]
		sh.mu.Lock()
		for i := range sh.turns.slots {
			if s := &sh.turns.slots[i]; s.val != nil && s.val.key.ns == ns {
				n++
			}
		}
		sh.mu.Unlock()
	}
	return n
}
