package lockstoretest

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/claimbus/claimbus/lockstore"
)

// LeaseStore is a store whose locks are leases, with a hand on its clock.
type LeaseStore struct {
	// Store is a fresh store whose locks are leases of the TTL asked for.
	Store lockstore.Store
	// Advance moves the store's clock forward by d. When it returns, every
	// lease that ran out on the way has ended: its Lost channel is closed
	// and its key handed to the next waiter. For the memory store it is
	// Clock.Advance.
	Advance func(d time.Duration)
}

// NewLeaseStoreFunc returns a fresh store whose locks are leases of ttl,
// with a hand on its clock. The suite closes the store when the subtest
// ends.
type NewLeaseStoreFunc func(t *testing.T, ttl time.Duration) LeaseStore

// leaseTTL is the TTL the lease tests ask for. The clock is fake, so its
// size only has to leave room for the steps the tests take.
const leaseTTL = time.Minute

// RunLeases runs the lease part of the suite on stores made by newStore:
// a lease that runs out closes Lost and hands the key to the next waiter,
// not a moment before its TTL; Refresh extends it; a released lock's lease
// never ends a later owner; a lost lock's Release reports ErrLockLost and
// never frees the next owner. Each subtest calls t.Parallel and takes its
// own store.
func RunLeases(t *testing.T, newStore NewLeaseStoreFunc) {
	t.Helper()
	tests := []struct {
		name string
		run  func(*bundle, func(time.Duration))
	}{
		{"LockIsRefresher", testLockIsRefresher},
		{"ExpiryHandsKeyToNextWaiter", testExpiryHandsKeyToNextWaiter},
		{"ExpiryFreesKey", testExpiryFreesKey},
		{"RefreshExtendsLease", testRefreshExtendsLease},
		{"ReleaseCancelsLease", testReleaseCancelsLease},
		{"RefreshEndedLock", testRefreshEndedLock},
		{"AfterLostOnExpiry", testAfterLostOnExpiry},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ls := newStore(t, leaseTTL)
			require.NotNil(t, ls.Advance, "LeaseStore.Advance")
			tt.run(setup(t, ls.Store), ls.Advance)
		})
	}
}

// refresher returns l as a Refresher, failing the test when it is not one.
func refresher(t *testing.T, l lockstore.Lock) lockstore.Refresher {
	t.Helper()
	r, ok := l.(lockstore.Refresher)
	require.True(t, ok, "%T does not implement lockstore.Refresher", l)
	return r
}

func testLockIsRefresher(b *bundle, _ func(time.Duration)) {
	l := b.lockNow(b.key())
	require.NoError(b.t, refresher(b.t, l).Refresh(b.ctx))
	require.NoError(b.t, l.Release(b.ctx))
}

func testExpiryHandsKeyToNextWaiter(b *bundle, advance func(time.Duration)) {
	key := b.key()
	first := b.lockNow(key)
	waiter := b.goLock(b.ctx, key)
	b.waitQueued(key, 1)

	advance(leaseTTL - time.Nanosecond)
	requireOpen(b.t, first.Lost(), "Lost one nanosecond before the lease ends")
	b.waitQueued(key, 1)
	b.requirePending(waiter, "waiter before the lease ended")

	advance(time.Nanosecond)
	requireClosed(b.t, first.Lost(), "Lost of an expired lease")
	second := b.awaitLock(waiter, "waiter after the lease ended")
	require.Greater(b.t, second.Token(), first.Token())
	requireOpen(b.t, second.Lost(), "Lost of the new owner")

	// The stale owner can neither free nor extend the new owner's grant,
	// and its Release says the lock was lost, each time.
	for i := range 2 {
		require.ErrorIs(b.t, first.Release(b.ctx), lockstore.ErrLockLost, "Release %d of an expired lock", i+1)
	}
	b.requireLocked(key)
	require.ErrorIs(b.t, refresher(b.t, first).Refresh(b.ctx), lockstore.ErrLockLost)
	h, ok := b.holder(key)
	require.True(b.t, ok)
	require.Equal(b.t, second.Token(), h.Token)

	// The new owner's lease runs from its own grant.
	advance(leaseTTL - time.Nanosecond)
	requireOpen(b.t, second.Lost(), "Lost of the new owner before its own lease ends")
	advance(time.Nanosecond)
	requireClosed(b.t, second.Lost(), "Lost of the new owner after its lease")
	b.requireFree(key)
}

func testExpiryFreesKey(b *bundle, advance func(time.Duration)) {
	key := b.key()
	first := b.lockNow(key)
	advance(leaseTTL)
	requireClosed(b.t, first.Lost(), "Lost of an expired lease")
	_, ok := b.holder(key)
	require.False(b.t, ok, "Held does not list an expired lease")

	second := b.lockNow(key)
	require.Greater(b.t, second.Token(), first.Token())
	require.ErrorIs(b.t, first.Release(b.ctx), lockstore.ErrLockLost, "Release of an expired lock")
	b.requireLocked(key)
	require.NoError(b.t, second.Release(b.ctx))
}

func testRefreshExtendsLease(b *bundle, advance func(time.Duration)) {
	key := b.key()
	l := b.lockNow(key)
	r := refresher(b.t, l)
	advance(leaseTTL / 2)
	require.NoError(b.t, r.Refresh(b.ctx))
	advance(leaseTTL / 2)
	requireOpen(b.t, l.Lost(), "Lost one TTL after the grant, half a TTL after a Refresh")
	b.requireLocked(key)
	advance(leaseTTL/2 - time.Nanosecond)
	requireOpen(b.t, l.Lost(), "Lost one nanosecond before the refreshed lease ends")
	advance(time.Nanosecond)
	requireClosed(b.t, l.Lost(), "Lost one TTL after the last Refresh")
	b.requireFree(key)
}

func testReleaseCancelsLease(b *bundle, advance func(time.Duration)) {
	key := b.key()
	first := b.lockNow(key)
	advance(leaseTTL / 2)
	require.NoError(b.t, first.Release(b.ctx))
	second := b.lockNow(key)
	// The first lock's lease would have ended now; the second's has not.
	advance(leaseTTL / 2)
	requireOpen(b.t, second.Lost(), "Lost of a later owner when an earlier, released lease would have ended")
	requireOpen(b.t, first.Lost(), "Lost of a released lock")
	b.requireLocked(key)
	advance(leaseTTL / 2)
	requireClosed(b.t, second.Lost(), "Lost of the later owner after its own lease")
}

func testRefreshEndedLock(b *bundle, advance func(time.Duration)) {
	released := b.lockNow(b.key())
	require.NoError(b.t, released.Release(b.ctx))
	require.ErrorIs(b.t, refresher(b.t, released).Refresh(b.ctx), lockstore.ErrLockLost, "Refresh after Release")

	expired := b.lockNow(b.key())
	advance(leaseTTL)
	requireClosed(b.t, expired.Lost(), "Lost of an expired lease")
	require.ErrorIs(b.t, refresher(b.t, expired).Refresh(b.ctx), lockstore.ErrLockLost, "Refresh after expiry")
}
