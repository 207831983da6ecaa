package lockstoretest

import (
	"context"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/claimbus/claimbus/lockstore"
)

// NewStoreFunc returns a fresh store for one subtest. The suite closes it
// when the subtest ends; Close is idempotent, so the backend may register
// its own cleanup too.
type NewStoreFunc func(t *testing.T) lockstore.Store

// Run runs the conformance suite on stores made by newStore: mutual
// exclusion, ErrLocked, FIFO waiters, cancelled waiters, contexts, release
// (nil for a lock held to the end, ErrLockLost for one the store ended),
// fencing tokens, Held, Close, key validation, lockstore.AfterLost (a lost
// lock calls f once, a released one never, stop before the loss stops it,
// f may call the store) and lockext.ReleaseLater (done is called once,
// with Release's result, and the key is free after it). Each subtest calls
// t.Parallel and takes its own store.
func Run(t *testing.T, newStore NewStoreFunc) {
	t.Helper()
	tests := []struct {
		name string
		run  func(*bundle)
	}{
		{"TryLockGrantsFreeKey", testTryLockGrantsFreeKey},
		{"TryLockFailsWhileHeld", testTryLockFailsWhileHeld},
		{"LockWaitsForRelease", testLockWaitsForRelease},
		{"DistinctKeysAreIndependent", testDistinctKeysAreIndependent},
		{"WaitersAreGrantedInOrder", testWaitersAreGrantedInOrder},
		{"CancelledWaiterLeavesQueue", testCancelledWaiterLeavesQueue},
		{"WaitEndsAtDeadline", testWaitEndsAtDeadline},
		{"DoneContext", testDoneContext},
		{"ContextBoundsOnlyTheWait", testContextBoundsOnlyTheWait},
		{"ReleaseIsIdempotent", testReleaseIsIdempotent},
		{"StaleReleaseIsHarmless", testStaleReleaseIsHarmless},
		{"TokensIncrease", testTokensIncrease},
		{"Held", testHeld},
		{"Close", testClose},
		{"ReleaseAfterClose", testReleaseAfterClose},
		{"InvalidKeys", testInvalidKeys},
		{"MutualExclusion", testMutualExclusion},
	}
	tests = append(tests, afterLostTests...)
	tests = append(tests, releaseLaterTests...)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tt.run(setup(t, newStore(t)))
		})
	}
}

func testTryLockGrantsFreeKey(b *bundle) {
	key := b.key()
	l := b.lockNow(key)
	require.Equal(b.t, key, l.Key())
	require.Positive(b.t, l.Token(), "a granted token is positive (0 means unknown)")
	require.False(b.t, l.AcquiredAt().IsZero(), "AcquiredAt is set")
	requireOpen(b.t, l.Lost(), "Lost of a held lock")
	require.NoError(b.t, l.Release(b.ctx))
}

func testTryLockFailsWhileHeld(b *bundle) {
	key, other := b.key(), b.key()
	l := b.lockNow(key)
	b.requireLocked(key)
	b.requireLocked(key)
	o := b.lockNow(other)
	require.NoError(b.t, l.Release(b.ctx))
	b.requireFree(key)
	require.NoError(b.t, o.Release(b.ctx))
}

func testLockWaitsForRelease(b *bundle) {
	key := b.key()
	first := b.lockNow(key)
	ch := b.goLock(b.ctx, key)
	b.waitQueued(key, 1)
	b.requirePending(ch, "waiter")
	b.requireLocked(key)

	require.NoError(b.t, first.Release(b.ctx))
	second := b.awaitLock(ch, "waiter after release")
	require.Equal(b.t, key, second.Key())
	require.Greater(b.t, second.Token(), first.Token())
	b.requireLocked(key)
	require.NoError(b.t, second.Release(b.ctx))
	b.requireFree(key)
}

func testDistinctKeysAreIndependent(b *bundle) {
	a, c := b.key(), b.key()
	la := b.lockNow(a)
	ctx, cancel := context.WithTimeout(b.ctx, Timeout)
	defer cancel()
	lc, err := b.store.Lock(ctx, c)
	require.NoError(b.t, err, "Lock on a free key while another key is held")
	require.NoError(b.t, la.Release(b.ctx))
	require.NoError(b.t, lc.Release(b.ctx))
}

func testWaitersAreGrantedInOrder(b *bundle) {
	const waiters = 8
	key := b.key()
	holder := b.lockNow(key)

	// Each waiter reports its index on order when granted, then releases,
	// which grants the next: the channel's order is the grant order.
	order := make(chan int, waiters)
	tokens := make([]atomic.Int64, waiters)
	errs := make(chan error, waiters)
	var wg sync.WaitGroup
	for i := range waiters {
		wg.Add(1)
		b.wg.Add(1)
		go func() {
			defer b.wg.Done()
			defer wg.Done()
			l, err := b.store.Lock(b.ctx, key)
			if err != nil {
				errs <- err
				return
			}
			tokens[i].Store(l.Token())
			order <- i
			errs <- l.Release(context.Background())
		}()
		b.waitQueued(key, i+1)
	}
	require.NoError(b.t, holder.Release(b.ctx))
	for want := range waiters {
		select {
		case got := <-order:
			require.Equal(b.t, want, got, "waiters are granted in the order they queued")
		case <-time.After(Timeout):
			b.t.Fatalf("waiter %d not granted within %s", want, Timeout)
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(b.t, err)
	}
	last := holder.Token()
	for i := range tokens {
		require.Greater(b.t, tokens[i].Load(), last, "token of waiter %d", i)
		last = tokens[i].Load()
	}
	b.requireFree(key)
}

func testCancelledWaiterLeavesQueue(b *bundle) {
	key := b.key()
	holder := b.lockNow(key)

	cancelCtx, cancel := context.WithCancel(b.ctx)
	defer cancel()
	cancelled := b.goLock(cancelCtx, key)
	b.waitQueued(key, 1)
	next := b.goLock(b.ctx, key)
	b.waitQueued(key, 2)

	cancel()
	r := b.await(cancelled, "cancelled waiter")
	require.ErrorIs(b.t, r.err, context.Canceled)
	require.Nil(b.t, r.lock, "a cancelled waiter is never granted")
	b.waitQueued(key, 1)
	b.requirePending(next, "second waiter")

	require.NoError(b.t, holder.Release(b.ctx))
	l := b.awaitLock(next, "the waiter behind a cancelled one")
	require.Greater(b.t, l.Token(), holder.Token())
	b.waitQueued(key, 0)
	require.NoError(b.t, l.Release(b.ctx))
	b.requireFree(key)
}

func testWaitEndsAtDeadline(b *bundle) {
	key := b.key()
	holder := b.lockNow(key)
	ctx, cancel := context.WithTimeout(b.ctx, 20*time.Millisecond)
	defer cancel()
	l, err := b.store.Lock(ctx, key)
	require.ErrorIs(b.t, err, context.DeadlineExceeded)
	require.Nil(b.t, l)
	b.waitQueued(key, 0)
	b.requireLocked(key)
	require.NoError(b.t, holder.Release(b.ctx))
	b.requireFree(key)
}

func testDoneContext(b *bundle) {
	free, held := b.key(), b.key()
	ctx, cancel := context.WithCancel(b.ctx)
	cancel()

	l, err := b.store.TryLock(ctx, free)
	require.ErrorIs(b.t, err, context.Canceled, "TryLock with a done ctx on a free key")
	require.Nil(b.t, l)
	l, err = b.store.Lock(ctx, free)
	require.ErrorIs(b.t, err, context.Canceled, "Lock with a done ctx on a free key")
	require.Nil(b.t, l)
	b.requireFree(free)

	holder := b.lockNow(held)
	l, err = b.store.TryLock(ctx, held)
	require.ErrorIs(b.t, err, context.Canceled, "TryLock with a done ctx on a held key")
	require.Nil(b.t, l)
	l, err = b.store.Lock(ctx, held)
	require.ErrorIs(b.t, err, context.Canceled, "Lock with a done ctx on a held key")
	require.Nil(b.t, l)
	b.waitQueued(held, 0)
	require.NoError(b.t, holder.Release(b.ctx))
	b.requireFree(held)
}

func testContextBoundsOnlyTheWait(b *bundle) {
	key := b.key()
	ctx, cancel := context.WithCancel(b.ctx)
	l, err := b.store.Lock(ctx, key)
	require.NoError(b.t, err)
	cancel()
	b.requireLocked(key)
	requireOpen(b.t, l.Lost(), "Lost after the Lock ctx ended")
	require.NoError(b.t, l.Release(b.ctx))
	b.requireFree(key)
}

func testReleaseIsIdempotent(b *bundle) {
	key := b.key()
	l := b.lockNow(key)
	lost := l.Lost()
	require.NoError(b.t, l.Release(b.ctx))
	require.NoError(b.t, l.Release(b.ctx), "second Release")
	requireOpen(b.t, lost, "Lost after the lock's own Release")
	requireOpen(b.t, l.Lost(), "Lost called after Release")
	b.requireFree(key)

	// Release needs no live context.
	l = b.lockNow(key)
	done, cancel := context.WithCancel(b.ctx)
	cancel()
	require.NoError(b.t, l.Release(done), "Release with a done ctx")
	b.requireFree(key)
}

func testStaleReleaseIsHarmless(b *bundle) {
	key := b.key()
	stale := b.lockNow(key)
	require.NoError(b.t, stale.Release(b.ctx))
	owner := b.lockNow(key)

	require.NoError(b.t, stale.Release(b.ctx), "Release of a released lock")
	b.requireLocked(key)
	h, ok := b.holder(key)
	require.True(b.t, ok, "the new owner is still listed by Held")
	require.Equal(b.t, owner.Token(), h.Token)
	require.NoError(b.t, owner.Release(b.ctx))
	b.requireFree(key)
}

func testTokensIncrease(b *bundle) {
	key, other := b.key(), b.key()
	var last int64
	for i := range 20 {
		var l lockstore.Lock
		if i%2 == 0 {
			l = b.lockNow(key)
		} else {
			ctx, cancel := context.WithTimeout(b.ctx, Timeout)
			var err error
			l, err = b.store.Lock(ctx, key)
			cancel()
			require.NoError(b.t, err)
		}
		require.Greater(b.t, l.Token(), last, "grant %d", i)
		last = l.Token()
		// Grants on another key in between do not disturb the order.
		o := b.lockNow(other)
		require.NoError(b.t, o.Release(b.ctx))
		require.NoError(b.t, l.Release(b.ctx))
	}
}

func testHeld(b *bundle) {
	keys := []lockstore.Key{b.key(), b.key(), b.key()}
	locks := make([]lockstore.Lock, len(keys))
	for i, k := range keys {
		locks[i] = b.lockNow(k)
	}
	hs, err := b.store.Held(b.ctx)
	require.NoError(b.t, err)
	for _, l := range locks {
		h, ok := findHolder(hs, l.Key())
		require.True(b.t, ok, "Held lists %s", l.Key())
		require.Equal(b.t, l.Token(), h.Token)
		require.True(b.t, l.AcquiredAt().Equal(h.AcquiredAt), "AcquiredAt %v, Held says %v", l.AcquiredAt(), h.AcquiredAt)
		require.NotEmpty(b.t, h.Node)
	}

	require.NoError(b.t, locks[1].Release(b.ctx))
	hs, err = b.store.Held(b.ctx)
	require.NoError(b.t, err)
	_, ok := findHolder(hs, keys[1])
	require.False(b.t, ok, "Held does not list a released key")
	for _, i := range []int{0, 2} {
		_, ok := findHolder(hs, keys[i])
		require.True(b.t, ok, "Held still lists %s", keys[i])
		require.NoError(b.t, locks[i].Release(b.ctx))
	}
}

func testClose(b *bundle) {
	key := b.key()
	holder := b.lockNow(key)
	lost := holder.Lost()
	waiter := b.goLock(b.ctx, key)
	b.waitQueued(key, 1)

	require.NoError(b.t, b.store.Close())
	r := b.await(waiter, "waiter interrupted by Close")
	require.ErrorIs(b.t, r.err, lockstore.ErrClosed)
	require.Nil(b.t, r.lock)
	requireClosed(b.t, lost, "Lost of a lock held at Close")
	requireClosed(b.t, holder.Lost(), "Lost called after Close")

	_, err := b.store.TryLock(b.ctx, b.key())
	require.ErrorIs(b.t, err, lockstore.ErrClosed, "TryLock after Close")
	_, err = b.store.Lock(b.ctx, b.key())
	require.ErrorIs(b.t, err, lockstore.ErrClosed, "Lock after Close")
	_, err = b.store.Held(b.ctx)
	require.ErrorIs(b.t, err, lockstore.ErrClosed, "Held after Close")
	require.ErrorIs(b.t, holder.Release(b.ctx), lockstore.ErrLockLost, "Release of a lock ended by Close")
	require.NoError(b.t, b.store.Close(), "second Close")
}

// testReleaseAfterClose: Close ends the locks the store granted, so their
// Release reports the loss, each time; a lock released before Close stays
// released.
func testReleaseAfterClose(b *bundle) {
	l := b.lockNow(b.key())
	released := b.lockNow(b.key())
	require.NoError(b.t, released.Release(b.ctx))

	require.NoError(b.t, b.store.Close())
	for i := range 2 {
		require.ErrorIs(b.t, l.Release(b.ctx), lockstore.ErrLockLost, "Release %d of a lock granted before Close", i+1)
	}
	require.NoError(b.t, released.Release(b.ctx), "Release after Close of a lock released before it")
}

func testInvalidKeys(b *bundle) {
	long := func(n int) string { return strings.Repeat("x", n) }
	invalid := map[string]lockstore.Key{
		"EmptyNamespace":   {Namespace: "", ID: "1"},
		"EmptyID":          {Namespace: "lockstoretest", ID: ""},
		"Empty":            {},
		"LongNamespace":    {Namespace: long(lockstore.MaxNamespaceLen + 1), ID: "1"},
		"LongID":           {Namespace: "lockstoretest", ID: long(lockstore.MaxIDLen + 1)},
		"InvalidUTF8ID":    {Namespace: "lockstoretest", ID: "\xff\xfe"},
		"InvalidUTF8Space": {Namespace: "\xc3", ID: "1"},
	}
	for name, key := range invalid {
		l, err := b.store.TryLock(b.ctx, key)
		require.ErrorIs(b.t, err, lockstore.ErrInvalidKey, "TryLock %s", name)
		require.Nil(b.t, l)
		l, err = b.store.Lock(b.ctx, key)
		require.ErrorIs(b.t, err, lockstore.ErrInvalidKey, "Lock %s", name)
		require.Nil(b.t, l)
	}

	// Keys at the limits are valid.
	fresh := b.key().ID
	atLimit := []lockstore.Key{
		{Namespace: long(lockstore.MaxNamespaceLen), ID: fresh},
		{Namespace: "lockstoretest", ID: fresh + long(lockstore.MaxIDLen-len(fresh))},
		{Namespace: "lockstoretest", ID: fresh + "/ünïcødé"},
	}
	for _, key := range atLimit {
		b.requireFree(key)
	}
}

func testMutualExclusion(b *bundle) {
	const goroutines, keys = 1000, 100
	ks := make([]lockstore.Key, keys)
	for i := range ks {
		ks[i] = b.key()
	}
	var (
		active     [keys]atomic.Int32
		lastToken  [keys]atomic.Int64
		overlaps   atomic.Int64
		staleToken atomic.Int64
		finished   atomic.Int64
		firstErr   atomic.Pointer[error]
	)
	fail := func(err error) { firstErr.CompareAndSwap(nil, &err) }
	done := goTogether(&b.wg, goroutines, func(i int) {
		k := i % keys
		l, err := b.store.Lock(b.ctx, ks[k])
		if err != nil {
			fail(err)
			return
		}
		if active[k].Add(1) != 1 {
			overlaps.Add(1)
		}
		if prev := lastToken[k].Swap(l.Token()); l.Token() <= prev {
			staleToken.Add(1)
		}
		runtime.Gosched()
		active[k].Add(-1)
		if err := l.Release(context.Background()); err != nil {
			fail(err)
			return
		}
		finished.Add(1)
	})
	select {
	case <-done:
	case <-time.After(4 * Timeout):
		b.t.Fatalf("%d of %d lockers finished within %s", finished.Load(), goroutines, 4*Timeout)
	}
	if err := firstErr.Load(); err != nil {
		require.NoError(b.t, *err)
	}
	require.Zero(b.t, overlaps.Load(), "grants while another owner held the key")
	require.Zero(b.t, staleToken.Load(), "grants whose token was not greater than the key's previous one")
	require.EqualValues(b.t, goroutines, finished.Load())
	for _, k := range ks {
		b.requireFree(k)
	}
}

func findHolder(hs []lockstore.Holder, key lockstore.Key) (lockstore.Holder, bool) {
	for _, h := range hs {
		if h.Key == key {
			return h, true
		}
	}
	return lockstore.Holder{}, false
}
