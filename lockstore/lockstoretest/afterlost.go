package lockstoretest

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/claimbus/claimbus/internal/afterlost"
	"github.com/claimbus/claimbus/internal/testwait"
	"github.com/claimbus/claimbus/lockstore"
)

// afterLostTests is the lockstore.AfterLost part of the suite. Close ends
// the locks, the one way every store loses a lock on demand.
var afterLostTests = []struct {
	name string
	run  func(*bundle)
}{
	{"AfterLostNeedsNoGoroutine", testAfterLostNeedsNoGoroutine},
	{"AfterLostRunsOnLoss", testAfterLostRunsOnLoss},
	{"AfterLostNeverRunsOnRelease", testAfterLostNeverRunsOnRelease},
	{"AfterLostStopBeforeLoss", testAfterLostStopBeforeLoss},
	{"AfterLostOnLostLock", testAfterLostOnLostLock},
	{"AfterLostMayCallTheStore", testAfterLostMayCallTheStore},
	{"AfterLostConcurrent", testAfterLostConcurrent},
}

// signal returns a function that closes the channel it returns, once, and
// counts its calls.
func signal() (f func(), ran <-chan struct{}, calls *atomic.Int32) {
	ch := make(chan struct{})
	calls = &atomic.Int32{}
	return func() {
		if calls.Add(1) == 1 {
			close(ch)
		}
	}, ch, calls
}

// awaitRun waits for ran to close, failing the test after Timeout.
func (b *bundle) awaitRun(ran <-chan struct{}, what string) {
	b.t.Helper()
	testwait.Recv(b.t, ran, Timeout, "%s to run", what)
}

func testAfterLostNeedsNoGoroutine(b *bundle) {
	l := b.lockNow(b.key())
	_, ok := l.(afterlost.Watcher)
	require.True(b.t, ok, "%T implements afterlost.Watcher: AfterLost needs no goroutine", l)
	require.NoError(b.t, l.Release(b.ctx))
}

func testAfterLostRunsOnLoss(b *bundle) {
	l := b.lockNow(b.key())
	f, ran, calls := signal()
	stop := lockstore.AfterLost(l, f)
	require.NoError(b.t, b.store.Close())
	b.awaitRun(ran, "AfterLost's f on a lock ended by Close")
	requireClosed(b.t, l.Lost(), "Lost once f ran")
	require.False(b.t, stop(), "stop after f ran")
	require.False(b.t, stop(), "a second stop")
	require.EqualValues(b.t, 1, calls.Load(), "f runs once")
}

func testAfterLostNeverRunsOnRelease(b *bundle) {
	key := b.key()
	l := b.lockNow(key)
	f, _, calls := signal()
	stop := lockstore.AfterLost(l, f)
	require.NoError(b.t, l.Release(b.ctx))
	// The key's next owner loses its lock: the released one is not told.
	next := b.lockNow(key)
	nf, nran, _ := signal()
	nstop := lockstore.AfterLost(next, nf)
	require.NoError(b.t, b.store.Close())
	b.awaitRun(nran, "AfterLost's f of the next owner")
	require.True(b.t, stop(), "stop of a released lock's f: it never ran, and now never will")
	require.Zero(b.t, calls.Load(), "f of a released lock")
	require.False(b.t, nstop())

	// Registered after the release, f never runs either.
	f2, _, calls2 := signal()
	stop2 := lockstore.AfterLost(l, f2)
	require.True(b.t, stop2(), "stop of an f registered on a released lock")
	require.Zero(b.t, calls2.Load())
}

func testAfterLostStopBeforeLoss(b *bundle) {
	l := b.lockNow(b.key())
	f, _, calls := signal()
	stop := lockstore.AfterLost(l, f)
	require.True(b.t, stop(), "stop before the loss")
	require.False(b.t, stop(), "a second stop")
	// A second registration on the same lock, kept: its run shows the
	// loss was reported, and the stopped f was not run with it.
	g, gran, _ := signal()
	lockstore.AfterLost(l, g)
	require.NoError(b.t, b.store.Close())
	b.awaitRun(gran, "the f not stopped")
	require.Zero(b.t, calls.Load(), "a stopped f never runs")
	require.ErrorIs(b.t, l.Release(b.ctx), lockstore.ErrLockLost)
}

func testAfterLostOnLostLock(b *bundle) {
	l := b.lockNow(b.key())
	require.NoError(b.t, b.store.Close())
	requireClosed(b.t, l.Lost(), "Lost after Close")
	f, ran, calls := signal()
	stop := lockstore.AfterLost(l, f)
	b.awaitRun(ran, "AfterLost's f on a lock lost already")
	require.False(b.t, stop(), "stop after f ran")
	require.EqualValues(b.t, 1, calls.Load())
}

// testAfterLostMayCallTheStore checks that f does not run under a mutex
// of the store: it releases the lost lock and asks the store for the same
// key, whose state (the memory store's shard) the loss was handled under.
// A store that answers a closed store's TryLock before taking any mutex
// proves it with a test of its own (the PostgreSQL store's
// TestAfterLostOnTerminatedConnection).
func testAfterLostMayCallTheStore(b *bundle) {
	l := b.lockNow(b.key())
	var releaseErr, lockErr error
	done := make(chan struct{})
	lockstore.AfterLost(l, func() {
		defer close(done)
		releaseErr = l.Release(b.ctx)
		_, lockErr = b.store.TryLock(b.ctx, l.Key())
	})
	require.NoError(b.t, b.store.Close())
	b.awaitRun(done, "an f that calls the store")
	require.ErrorIs(b.t, releaseErr, lockstore.ErrLockLost, "Release from f")
	require.ErrorIs(b.t, lockErr, lockstore.ErrClosed, "TryLock from f")
}

// testAfterLostConcurrent registers, stops and releases from many
// goroutines, then ends every lock still held: each f runs exactly when
// its stop did not return true and its lock was lost, never twice.
func testAfterLostConcurrent(b *bundle) {
	const workers, rounds = 16, 20
	type reg struct {
		stop     func() bool
		ran      <-chan struct{}
		calls    *atomic.Int32
		released bool
		stopped  bool
	}
	var mu sync.Mutex
	var regs []*reg
	var errs []error
	var wg sync.WaitGroup
	for w := range workers {
		keys := make([]lockstore.Key, rounds)
		for i := range keys {
			keys[i] = b.key()
		}
		wg.Go(func() {
			// No require here: a failure in this goroutine is reported by
			// the test's goroutine, from errs.
			for i, key := range keys {
				l, err := b.store.TryLock(b.ctx, key)
				if err != nil {
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
					return
				}
				var mine []*reg
				for range 3 {
					f, ran, calls := signal()
					mine = append(mine, &reg{stop: lockstore.AfterLost(l, f), ran: ran, calls: calls})
				}
				mine[0].stopped = mine[0].stop()
				if (w+i)%2 == 0 {
					err = l.Release(b.ctx)
					for _, r := range mine {
						r.released = true
					}
				}
				mu.Lock()
				regs = append(regs, mine...)
				if err != nil {
					errs = append(errs, err)
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	require.Empty(b.t, errs)
	require.Len(b.t, regs, workers*rounds*3)
	require.NoError(b.t, b.store.Close())
	for i, r := range regs {
		switch {
		case r.stopped:
			require.Zero(b.t, r.calls.Load(), "registration %d: f stopped before the loss", i)
		case r.released:
			require.True(b.t, r.stop(), "registration %d: f of a released lock is still stoppable", i)
			require.Zero(b.t, r.calls.Load(), "registration %d: f of a released lock", i)
		default:
			b.awaitRun(r.ran, "f of a lock lost at Close")
			require.False(b.t, r.stop(), "registration %d: stop after the loss", i)
			require.EqualValues(b.t, 1, r.calls.Load(), "registration %d: f runs once", i)
		}
	}
}

// testAfterLostOnExpiry is the lease part: the end of a lease runs f, and
// Advance returning means f has been called.
func testAfterLostOnExpiry(b *bundle, advance func(time.Duration)) {
	l := b.lockNow(b.key())
	f, ran, _ := signal()
	stop := lockstore.AfterLost(l, f)
	advance(leaseTTL)
	select {
	case <-ran:
	default:
		b.t.Fatal("AfterLost's f had not run when the clock's Advance returned")
	}
	require.False(b.t, stop())
	kept := b.lockNow(b.key())
	g, _, gcalls := signal()
	gstop := lockstore.AfterLost(kept, g)
	require.NoError(b.t, refresher(b.t, kept).Refresh(b.ctx))
	advance(leaseTTL / 2)
	require.True(b.t, gstop(), "stop of a lease not ended yet")
	advance(leaseTTL)
	requireClosed(b.t, kept.Lost(), "Lost of the lease after its TTL")
	require.Zero(b.t, gcalls.Load(), "a stopped f on an expired lease")
}
