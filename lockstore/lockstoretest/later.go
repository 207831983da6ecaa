package lockstoretest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/claimbus/claimbus/internal/lockext"
	"github.com/claimbus/claimbus/internal/testwait"
	"github.com/claimbus/claimbus/lockstore"
)

// releaseLaterTests is the lockext.ReleaseLater part of the suite: on a
// store whose locks are lockext.LaterReleasers, and through the fallback
// to Release on the others.
var releaseLaterTests = []struct {
	name string
	run  func(*bundle)
}{
	{"ReleaseLaterFreesTheKey", testReleaseLaterFreesTheKey},
	{"ReleaseLaterOnLostLock", testReleaseLaterOnLostLock},
	{"ReleaseLaterLetsTheWaiterIn", testReleaseLaterLetsTheWaiterIn},
}

// releaseLater releases l with lockext.ReleaseLater and returns what its
// done was called with, once it is; done must be called exactly once.
func (b *bundle) releaseLater(l lockstore.Lock) error {
	b.t.Helper()
	done := make(chan error, 2)
	lockext.ReleaseLater(b.ctx, l, func(err error) { done <- err })
	err := testwait.Recv(b.t, done, Timeout, "ReleaseLater's done")
	require.Empty(b.t, done, "done called twice")
	return err
}

func testReleaseLaterFreesTheKey(b *bundle) {
	key := b.key()
	l := b.lockNow(key)
	require.NoError(b.t, b.releaseLater(l), "a lock held to its release")
	require.NoError(b.t, l.Release(b.ctx), "Release after ReleaseLater")
	next := b.requireFree(key)
	require.Greater(b.t, next.Token(), l.Token())
	require.NoError(b.t, next.Release(b.ctx))
}

func testReleaseLaterOnLostLock(b *bundle) {
	l := b.lockNow(b.key())
	require.NoError(b.t, b.store.Close())
	require.ErrorIs(b.t, b.releaseLater(l), lockstore.ErrLockLost, "a lock the store ended")
}

func testReleaseLaterLetsTheWaiterIn(b *bundle) {
	key := b.key()
	l := b.lockNow(key)
	waiter := b.goLock(b.ctx, key)
	b.waitQueued(key, 1)
	require.NoError(b.t, b.releaseLater(l))
	next := b.awaitLock(waiter, "the waiter after ReleaseLater")
	require.Greater(b.t, next.Token(), l.Token())
	require.NoError(b.t, next.Release(b.ctx))
}

// WaitTakeable waits, up to Timeout, until l takes key at once, and gives
// it back. A store may finish a release after its caller has moved on (the
// PostgreSQL store's ReleaseLater, the unlock of a failed probe), and may
// show the key free on the server before its own node passes the key's
// turn on; after WaitTakeable a claim of key on l is uncontended. An error
// other than lockstore.ErrLocked fails the test.
func WaitTakeable(t testing.TB, l lockstore.Locker, key lockstore.Key) {
	t.Helper()
	ctx := context.Background()
	testwait.Until(t, Timeout, time.Millisecond, func() bool {
		lk, err := l.TryLock(ctx, key)
		if errors.Is(err, lockstore.ErrLocked) {
			return false
		}
		require.NoError(t, err)
		require.NoError(t, lk.Release(ctx))
		return true
	}, "%v cannot be taken at once", key)
}
