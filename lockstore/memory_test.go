package lockstore_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/claimbus/claimbus/internal/lockext"
	"github.com/claimbus/claimbus/internal/testwait"
	"github.com/claimbus/claimbus/lockstore"
	"github.com/claimbus/claimbus/lockstore/lockstoretest"
)

func key(id string) lockstore.Key { return lockstore.Key{Namespace: "transfer", ID: id} }

// await returns what arrives on ch within lockstoretest.Timeout.
func await[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	return testwait.Recv(t, ch, lockstoretest.Timeout, "%s", what)
}

type lockResult struct {
	lock lockstore.Lock
	err  error
}

// goLock calls Lock in a goroutine and returns where its result arrives.
func goLock(ctx context.Context, m *lockstore.Memory, k lockstore.Key) <-chan lockResult {
	ch := make(chan lockResult, 1)
	go func() {
		l, err := m.Lock(ctx, k)
		ch <- lockResult{l, err}
	}()
	return ch
}

// waitQueued polls until n callers wait for k.
func waitQueued(t *testing.T, m *lockstore.Memory, k lockstore.Key, n int) {
	t.Helper()
	require.Eventually(t, func() bool { return m.Waiting(k) == n }, lockstoretest.Timeout, time.Millisecond,
		"%d waiter(s) on %s", n, k)
}

func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// TestMemoryConformanceCollidingKeys runs the suite with every key hashed
// alike: one shard, one probe sequence, keys told apart only by comparison.
func TestMemoryConformanceCollidingKeys(t *testing.T) {
	t.Parallel()
	lockstoretest.Run(t, func(t *testing.T) lockstore.Store {
		m := newMemory(t, lockstore.MemoryConfig{})
		lockstore.CollideAllKeys(m)
		return m
	})
}

func TestMemoryConfigValidate(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name         string
		modify       func(*lockstore.MemoryConfig)
		wantProblems []string
	}{
		{name: "Zero", modify: func(*lockstore.MemoryConfig) {}},
		{name: "Full", modify: func(c *lockstore.MemoryConfig) {
			*c = lockstore.MemoryConfig{TTL: time.Second, Clock: lockstoretest.NewClock(epoch), Node: "n1", Shards: 8}
		}},
		{name: "OneShard", modify: func(c *lockstore.MemoryConfig) { c.Shards = 1 }},
		{name: "MaxShards", modify: func(c *lockstore.MemoryConfig) { c.Shards = 1 << 16 }},
		{name: "NegativeTTL", modify: func(c *lockstore.MemoryConfig) { c.TTL = -time.Second }, wantProblems: []string{"TTL is -1s"}},
		{name: "NegativeShards", modify: func(c *lockstore.MemoryConfig) { c.Shards = -4 }, wantProblems: []string{"Shards is -4"}},
		{name: "ShardsNotPowerOfTwo", modify: func(c *lockstore.MemoryConfig) { c.Shards = 48 }, wantProblems: []string{"Shards is 48"}},
		{name: "TooManyShards", modify: func(c *lockstore.MemoryConfig) { c.Shards = 1 << 17 }, wantProblems: []string{"Shards is 131072"}},
		{name: "EveryProblem", modify: func(c *lockstore.MemoryConfig) {
			c.TTL, c.Shards = -time.Nanosecond, 3
		}, wantProblems: []string{"TTL is -1ns", "Shards is 3"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var cfg lockstore.MemoryConfig
			tt.modify(&cfg)
			err := cfg.Validate()
			m, newErr := lockstore.NewMemory(cfg)
			if len(tt.wantProblems) == 0 {
				require.NoError(t, err)
				require.NoError(t, newErr)
				require.NoError(t, m.Close())
				return
			}
			require.Error(t, err)
			for _, p := range tt.wantProblems {
				require.ErrorContains(t, err, p)
			}
			require.EqualError(t, newErr, err.Error(), "NewMemory reports what Validate does")
			require.Nil(t, m)
		})
	}
}

func TestMemoryNode(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	for _, tt := range []struct{ node, want string }{
		{"", "/" + strconv.Itoa(os.Getpid())},
		{"node-7", "node-7"},
	} {
		m := newMemory(t, lockstore.MemoryConfig{Node: tt.node})
		l, err := m.TryLock(ctx, key("1"))
		require.NoError(t, err)
		hs, err := m.Held(ctx)
		require.NoError(t, err)
		require.Len(t, hs, 1)
		require.Contains(t, hs[0].Node, tt.want)
		require.NoError(t, l.Release(ctx))
	}
}

func TestMemoryAcquiredAt(t *testing.T) {
	t.Parallel()
	ctx := t.Context()

	clock := lockstoretest.NewClock(epoch)
	m := newMemory(t, lockstore.MemoryConfig{Clock: clock})
	a, err := m.TryLock(ctx, key("a"))
	require.NoError(t, err)
	require.True(t, a.AcquiredAt().Equal(epoch), "AcquiredAt %v, clock %v", a.AcquiredAt(), epoch)
	clock.Advance(90 * time.Second)
	b, err := m.TryLock(ctx, key("b"))
	require.NoError(t, err)
	require.True(t, b.AcquiredAt().Equal(epoch.Add(90*time.Second)))

	sys := newMemory(t, lockstore.MemoryConfig{})
	before := time.Now()
	l, err := sys.TryLock(ctx, key("a"))
	require.NoError(t, err)
	after := time.Now()
	require.False(t, l.AcquiredAt().Before(before), "AcquiredAt %v before %v", l.AcquiredAt(), before)
	require.False(t, l.AcquiredAt().After(after), "AcquiredAt %v after %v", l.AcquiredAt(), after)
}

// Reset ends every lock as a lease expiry would, and never rewinds tokens.
func TestMemoryReset(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	m := newMemory(t, lockstore.MemoryConfig{})
	lone, err := m.TryLock(ctx, key("lone"))
	require.NoError(t, err)
	loneLost := lone.Lost()
	busy, err := m.TryLock(ctx, key("busy"))
	require.NoError(t, err)
	waiter := goLock(ctx, m, key("busy"))
	waitQueued(t, m, key("busy"), 1)

	require.NoError(t, m.Reset(ctx))
	require.True(t, isClosed(loneLost), "Lost of a lock ended by Reset")
	require.True(t, isClosed(busy.Lost()), "Lost asked for after Reset")
	r := await(t, waiter, "waiter after Reset")
	require.NoError(t, r.err)
	require.Greater(t, r.lock.Token(), busy.Token())
	require.Equal(t, 1, keysKept(m), "only the waiter's grant is left")

	again, err := m.TryLock(ctx, key("lone"))
	require.NoError(t, err, "a key reset with no waiter is free")
	require.Greater(t, again.Token(), lone.Token(), "Reset does not rewind tokens")
	require.ErrorIs(t, lone.Release(ctx), lockstore.ErrLockLost, "Release of a lock ended by Reset")
	_, err = m.TryLock(ctx, key("lone"))
	require.ErrorIs(t, err, lockstore.ErrLocked, "a stale Release does not free the new owner")

	require.NoError(t, m.Reset(ctx))
	require.Zero(t, keysKept(m))
	done, cancel := context.WithCancel(ctx)
	cancel()
	require.ErrorIs(t, m.Reset(done), context.Canceled)
	require.NoError(t, m.Close())
	require.ErrorIs(t, m.Reset(ctx), lockstore.ErrClosed)
	require.Zero(t, m.Waiting(key("busy")))
	require.Zero(t, keysKept(m))
}

// Release tells the truth: a lock the store ended (lease expiry, Reset,
// Close) releases to an error wrapping ErrLockLost and naming its key, each
// time, and ErrClosed too once the store is closed; a lock released by its
// owner releases to nil again.
func TestMemoryReleaseOfLostLock(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	clock := lockstoretest.NewClock(epoch)
	m := newMemory(t, lockstore.MemoryConfig{TTL: time.Minute, Clock: clock})
	take := func(id string) lockstore.Lock {
		t.Helper()
		l, err := m.TryLock(ctx, key(id))
		require.NoError(t, err)
		return l
	}
	requireLost := func(l lockstore.Lock, closed bool, what string) {
		t.Helper()
		for range 2 {
			err := l.Release(ctx)
			require.ErrorIs(t, err, lockstore.ErrLockLost, what)
			require.ErrorContains(t, err, l.Key().String(), what)
			if closed {
				require.ErrorIs(t, err, lockstore.ErrClosed, what)
			} else {
				require.NotErrorIs(t, err, lockstore.ErrClosed, what)
			}
		}
	}

	released := take("released")
	require.NoError(t, released.Release(ctx))
	expired := take("expired")
	clock.Advance(time.Minute)
	requireLost(expired, false, "Release of an expired lease")
	reset := take("reset")
	require.NoError(t, m.Reset(ctx))
	requireLost(reset, false, "Release of a lock ended by Reset")
	held := take("held")
	require.NoError(t, m.Close())
	requireLost(held, true, "Release of a lock ended by Close")
	requireLost(expired, true, "Release of a lock lost before Close, after it")
	require.NoError(t, released.Release(ctx), "Release of a lock released before Close")
}

func TestMemoryRefreshWithoutTTL(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	m := newMemory(t, lockstore.MemoryConfig{})
	l, err := m.TryLock(ctx, key("1"))
	require.NoError(t, err)
	r, ok := l.(lockstore.Refresher)
	require.True(t, ok)
	require.NoError(t, r.Refresh(ctx), "Refresh reports a held lock")
	done, cancel := context.WithCancel(ctx)
	cancel()
	require.ErrorIs(t, r.Refresh(done), context.Canceled)
	require.NoError(t, l.Release(ctx))
	err = r.Refresh(ctx)
	require.ErrorIs(t, err, lockstore.ErrLockLost)
	require.ErrorContains(t, err, "transfer/1")

	l, err = m.TryLock(ctx, key("2"))
	require.NoError(t, err)
	require.NoError(t, m.Close())
	err = l.(lockstore.Refresher).Refresh(ctx)
	require.ErrorIs(t, err, lockstore.ErrLockLost)
	require.ErrorIs(t, err, lockstore.ErrClosed)
}

// A lease on the system clock ends by itself: its timer hands the key on.
func TestMemoryLeaseSystemClock(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	m := newMemory(t, lockstore.MemoryConfig{TTL: 5 * time.Millisecond})
	first, err := m.TryLock(ctx, key("1"))
	require.NoError(t, err)
	waiter := goLock(ctx, m, key("1"))
	await(t, first.Lost(), "Lost of a lease on the system clock")
	r := await(t, waiter, "waiter behind an expired lease")
	require.NoError(t, r.err)
	require.Greater(t, r.lock.Token(), first.Token())
	await(t, r.lock.Lost(), "Lost of the waiter's own lease")
	require.Eventually(t, func() bool { return keysKept(m) == 0 }, lockstoretest.Timeout, time.Millisecond)
}

// Close stops every lease timer, so that no store goroutine outlives it.
func TestMemoryCloseStopsLeaseTimers(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	clock := lockstoretest.NewClock(epoch)
	m := newMemory(t, lockstore.MemoryConfig{TTL: time.Minute, Clock: clock})
	var locks []lockstore.Lock
	for i := range 3 {
		l, err := m.TryLock(ctx, key(strconv.Itoa(i)))
		require.NoError(t, err)
		locks = append(locks, l)
	}
	require.NoError(t, locks[0].(lockstore.Refresher).Refresh(ctx))
	require.Equal(t, 3, clock.Pending(), "one timer per lease; Refresh replaces its lock's timer")
	require.NoError(t, locks[1].Release(ctx))
	require.Equal(t, 2, clock.Pending(), "Release stops its lease timer")
	require.NoError(t, m.Close())
	require.Zero(t, clock.Pending(), "Close stops every lease timer")

	sys := newMemory(t, lockstore.MemoryConfig{TTL: time.Hour})
	for i := range 100 {
		_, err := sys.TryLock(ctx, key(strconv.Itoa(i)))
		require.NoError(t, err)
	}
	require.NoError(t, sys.Close()) // goleak in TestMain checks no timer goroutine is left
}

// Tokens carry their shard, so they are unique in the whole store.
func TestMemoryTokensUnique(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	m := newMemory(t, lockstore.MemoryConfig{Shards: 16})
	seen := map[int64]lockstore.Key{}
	for round := range 3 {
		for i := range 500 {
			l, err := m.TryLock(ctx, key(strconv.Itoa(i)))
			require.NoError(t, err)
			prev, dup := seen[l.Token()]
			require.False(t, dup, "round %d: token %d of %s already given to %s", round, l.Token(), l.Key(), prev)
			seen[l.Token()] = l.Key()
			require.NoError(t, l.Release(ctx))
		}
	}
}

// A storm of lockers, waiters and cancelled waiters on many keys leaves no
// key behind.
func TestMemoryStormLeavesNoKeys(t *testing.T) {
	t.Parallel()
	m := newMemory(t, lockstore.MemoryConfig{Shards: 4})
	const workers, keys, rounds = 64, 200, 200
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for r := range rounds {
				k := key(strconv.Itoa((w*rounds + r*7) % keys))
				var (
					l   lockstore.Lock
					err error
				)
				switch r % 3 {
				case 0:
					l, err = m.TryLock(context.Background(), k)
				case 1:
					l, err = m.Lock(context.Background(), k)
				default:
					// A waiter that may give up: cancelled at once or
					// after some of the queue moved.
					ctx, cancel := context.WithCancel(context.Background())
					if r%2 == 0 {
						cancel()
					}
					go cancel()
					l, err = m.Lock(ctx, k)
					cancel()
				}
				switch {
				case err == nil:
					if rerr := l.Release(context.Background()); rerr != nil {
						errs <- rerr
						return
					}
				case errors.Is(err, lockstore.ErrLocked), errors.Is(err, context.Canceled):
				default:
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	require.Zero(t, keysKept(m), "keys left after the storm")
	for i := range keys {
		require.Zero(t, m.Waiting(key(strconv.Itoa(i))))
	}
	hs, err := m.Held(t.Context())
	require.NoError(t, err)
	require.Empty(t, hs)
}

// A cancelled Lock either got the key (and holds it) or left no trace:
// whichever of the grant and the cancellation the store saw first.
func TestMemoryCancelRacesGrant(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	m := newMemory(t, lockstore.MemoryConfig{})
	k := key("race")
	granted, cancelled := 0, 0
	for i := range 300 {
		holder, err := m.TryLock(ctx, k)
		require.NoError(t, err)
		wctx, cancel := context.WithCancel(ctx)
		waiter := goLock(wctx, m, k)
		waitQueued(t, m, k, 1)
		cancel()
		for range i % 8 {
			runtime.Gosched() // a varying head start for the waiter's way out
		}
		require.NoError(t, holder.Release(ctx))
		r := await(t, waiter, "racing waiter")
		cancel()
		if r.err != nil {
			require.ErrorIs(t, r.err, context.Canceled)
			cancelled++
		} else {
			_, err := m.TryLock(ctx, k)
			require.ErrorIs(t, err, lockstore.ErrLocked, "a Lock that returned a lock holds it")
			require.NoError(t, r.lock.Release(ctx))
			granted++
		}
		require.Zero(t, keysKept(m), "after %d grants and %d cancellations", granted, cancelled)
	}
	t.Logf("%d grants, %d cancellations", granted, cancelled)
}

func TestMemoryWaitingAndLen(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	m := newMemory(t, lockstore.MemoryConfig{})
	require.Zero(t, m.Waiting(key("free")))
	require.Zero(t, m.Waiting(lockstore.Key{}), "an invalid key has no waiters")
	l, err := m.TryLock(ctx, key("held"))
	require.NoError(t, err)
	require.Equal(t, 1, keysKept(m))
	require.Zero(t, m.Waiting(key("held")))
	wctx, cancel := context.WithCancel(ctx)
	waiters := []<-chan lockResult{goLock(wctx, m, key("held"))}
	waitQueued(t, m, key("held"), 1)
	waiters = append(waiters, goLock(wctx, m, key("held")))
	waitQueued(t, m, key("held"), 2)
	require.Equal(t, 1, keysKept(m), "waiters take no key of their own")
	cancel()
	for _, w := range waiters {
		require.ErrorIs(t, await(t, w, "cancelled waiter").err, context.Canceled)
	}
	require.Zero(t, m.Waiting(key("held")))
	require.NoError(t, l.Release(ctx))
	require.Zero(t, keysKept(m))
}

func TestMemorySortKeys(t *testing.T) {
	t.Parallel()
	m := newMemory(t, lockstore.MemoryConfig{})
	keys := []lockstore.Key{key("b"), {Namespace: "staff", ID: "a"}, key("a"), key("b")}
	require.Equal(t, []lockstore.Key{{Namespace: "staff", ID: "a"}, key("a"), key("b")}, lockext.SortKeys(m, keys))
}

// TestMemoryStormLeavesNoMemory holds many keys at once, releases them all
// and checks that the heap returns to where it was: no per-key memory is
// kept, and the tables shrink. It does not call t.Parallel, so it runs
// alone and the heap it measures is its own.
func TestMemoryStormLeavesNoMemory(t *testing.T) {
	ctx := t.Context()
	m := newMemory(t, lockstore.MemoryConfig{})
	heap := func() uint64 {
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		return ms.HeapAlloc
	}
	const keys = 100_000
	ids := make([]string, keys)
	for i := range ids {
		ids[i] = fmt.Sprintf("k%07d", i)
	}
	locks := make([]lockstore.Lock, keys)
	before := heap()
	for i, id := range ids {
		l, err := m.TryLock(ctx, key(id))
		require.NoError(t, err)
		locks[i] = l
	}
	require.Equal(t, keys, keysKept(m))
	held := heap()
	for i, l := range locks {
		require.NoError(t, l.Release(ctx))
		locks[i] = nil
	}
	require.Zero(t, keysKept(m))
	after := heap()
	t.Logf("heap: %d B before, %d B while %d keys were held, %d B after", before, held, keys, after)
	require.Greater(t, held, before+keys*64, "holding the keys takes memory")
	require.Less(t, after, before+64<<10, "the store keeps less than 64 KiB after the storm")
	runtime.KeepAlive(ids)
}

// keysKept is the number of keys m keeps: those held (their waiters queue on
// them); keys with neither holder nor waiter are not kept.
func keysKept(m *lockstore.Memory) int { return int(m.Stats().Held) }
