package lockstoretest

import (
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
