package postgres

import (
	"context"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/claimbus/claimbus/internal/pgtest"
	"github.com/claimbus/claimbus/internal/testlog"
	"github.com/claimbus/claimbus/lockstore"
)

// A lock connection that goes down is logged once at Warn, however many
// requests fail while it is down, and once at Info when it is back.
func TestLockConnectionDownIsLoggedOnce(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	dsn := pgtest.DSN(t)
	var logs testlog.Buffer
	pool := pgtest.Connect(t, dsn, pgtest.PoolConfig{MaxConns: 2, ApplicationName: "connlog"})
	s := newTestStore(t, pool, Config{LockConns: 1, ReconnectBackoff: 200 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	admin := serialAdmin(t, dsn)

	held, err := s.TryLock(ctx, lockstore.Key{Namespace: "connlog", ID: "held"})
	require.NoError(t, err)
	terminateBackend(ctx, t, admin, connPIDs(s)[0])
	requireClosedWithin(t, held.Lost(), 5*time.Second, "the lock of the terminated connection")
	// Requests while the connection is down fail, each, without a log line.
	failed := 0
	for i := 0; connPIDs(s)[0] == 0 && i < 20; i++ {
		if _, err := s.TryLock(ctx, lockstore.Key{Namespace: "connlog", ID: fmt.Sprint(i)}); err != nil {
			failed++
		}
	}
	waitFor(t, "reconnected", func() bool { return connPIDs(s)[0] != 0 })
	waitFor(t, "the reconnection logged", func() bool { return len(logs.Lines("lock connection back")) == 1 })

	down := logs.Lines("lock connection down")
	require.Len(t, down, 1, "one Warn for the connection going down, after %d failed requests", failed)
	require.Contains(t, down[0], "level=WARN")
	require.Contains(t, down[0], "conn=0")
	require.Contains(t, down[0], "locks_lost=1")
	back := logs.Lines("lock connection back")
	require.Contains(t, back[0], "level=INFO")
	require.Contains(t, back[0], "down_for=")

	l, err := s.TryLock(context.Background(), lockstore.Key{Namespace: "connlog", ID: "after"})
	require.NoError(t, err)
	require.NoError(t, l.Release(ctx))
}
