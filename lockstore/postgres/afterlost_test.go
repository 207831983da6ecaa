package postgres

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/claimbus/claimbus/internal/pgtest"
	"github.com/claimbus/claimbus/lockstore"
)

// TestAfterLostOnTerminatedConnection: when the server ends a lock
// connection's session, the lock connection that ends its locks calls
// their AfterLost functions, outside its mutex (f releases the lock and
// asks the same connection for another key: under the mutex that would
// deadlock), and not the ones stopped before.
func TestAfterLostOnTerminatedConnection(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	dsn := pgtest.DSN(t)
	admin := serialAdmin(t, dsn)
	s := newTestStore(t, pgtest.Connect(t, dsn, pgtest.PoolConfig{MaxConns: 2, ApplicationName: "afterlost"}),
		Config{LockConns: 1, KeepAlive: 100 * time.Millisecond})
	l, err := s.TryLock(ctx, lockstore.Key{Namespace: "afterlost", ID: "1"})
	require.NoError(t, err)

	var stoppedCalls atomic.Int32
	stopped := lockstore.AfterLost(l, func() { stoppedCalls.Add(1) })
	require.True(t, stopped(), "stop before the loss")
	ran := make(chan error, 1)
	var lockErr error
	stop := lockstore.AfterLost(l, func() {
		_, lockErr = s.TryLock(ctx, lockstore.Key{Namespace: "afterlost", ID: "2"})
		ran <- l.Release(ctx)
	})

	pid := connPIDs(s)[l.(*pgLock).c.index]
	terminateBackend(ctx, t, admin, pid)
	select {
	case err := <-ran:
		require.ErrorIs(t, err, lockstore.ErrLockLost, "Release from f")
		require.ErrorIs(t, lockErr, lockstore.ErrUnavailable, "TryLock from f, on the connection being replaced")
	case <-time.After(10 * time.Second):
		t.Fatal("AfterLost's f did not run when the lock connection was terminated")
	}
	requireClosedWithin(t, l.Lost(), time.Second, "Lost once f ran")
	require.False(t, stop(), "stop after the loss")
	require.Zero(t, stoppedCalls.Load(), "a stopped f")
}
