package postgres

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/claimbus/claimbus/internal/pgtest"
	"github.com/claimbus/claimbus/lockstore"
)

// stoppedFn is what a fn that Close interrupted saw.
type stoppedFn struct {
	err   error // the call's error
	cause error // context.Cause of fn's ctx when fn returned
}

// Close stops what it started, within Config.Timeout: running fns get a
// ctx cancelled with cause ErrClosed and their transactions never commit,
// even a fn that ignores its ctx; calls waiting for the node's turn or for
// the server fail with ErrClosed.
func TestCloseStopsRunningAndWaitingCalls(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	dsn := pgtest.DSN(t)
	serialCounterTable(ctx, t, dsn, "heeds", "ignores")
	pool := pgtest.Connect(t, dsn, pgtest.PoolConfig{MaxConns: 8, ApplicationName: "closing-node"})
	s := newTestStore(t, pool, Config{LeaseBound: time.Second, KeepAlive: 200 * time.Millisecond})
	timeout := s.cfg.Timeout
	admin := serialAdmin(t, dsn)
	heeds := lockstore.Key{Namespace: "close", ID: "heeds"}
	ignores := lockstore.Key{Namespace: "close", ID: "ignores"}
	remote := lockstore.Key{Namespace: "close", ID: "held elsewhere"}
	job := lockstore.Key{Namespace: "close", ID: "job"}
	remoteID := serialLockID(t, s, remote)
	ignoresID := serialLockID(t, s, ignores)
	_, err := admin.Exec(ctx, "SELECT pg_advisory_lock($1, $2)", remoteID.Namespace, remoteID.ID)
	require.NoError(t, err)

	// bounded bounds the blocking fns, so that the old behaviour fails
	// the test instead of hanging it.
	const bounded = 4 * time.Second
	entered := make(chan struct{}, 3)
	results := make(map[string]chan stoppedFn)
	run := func(name string, call func() (error, error)) {
		ch := make(chan stoppedFn, 1)
		results[name] = ch
		go func() {
			var r stoppedFn
			r.err, r.cause = call()
			ch <- r
		}()
	}
	// Runs, writes, and waits for its ctx.
	run("heeds", func() (error, error) {
		var cause error
		_, err := runSerialize(ctx, s, heeds, func(ctx context.Context, tx pgx.Tx) (int, error) {
			n, err := increment(ctx, tx, "heeds")
			entered <- struct{}{}
			select {
			case <-ctx.Done():
				cause = context.Cause(ctx)
			case <-time.After(bounded):
			}
			return n, err // as if it had finished its work
		})
		return err, cause
	})
	// Runs, writes, and ignores its ctx until the test lets it go (at the
	// latest when it ends, before its pool closes).
	letGo := make(chan struct{})
	var letGoOnce sync.Once
	release := func() { letGoOnce.Do(func() { close(letGo) }) }
	t.Cleanup(release)
	run("ignores", func() (error, error) {
		var cause error
		_, err := runSerialize(ctx, s, ignores, func(ctx context.Context, tx pgx.Tx) (int, error) {
			n, err := increment(ctx, tx, "ignores")
			entered <- struct{}{}
			<-letGo
			cause = context.Cause(ctx)
			return n, err
		})
		return err, cause
	})
	// An Exclusive job waiting for its ctx.
	run("job", func() (error, error) {
		var cause error
		_, err := runExclusive(ctx, s, job, func(ctx context.Context, conn *pgx.Conn) (int, error) {
			entered <- struct{}{}
			select {
			case <-ctx.Done():
				cause = context.Cause(ctx)
			case <-time.After(bounded):
			}
			return 0, nil
		})
		return err, cause
	})
	for range 3 {
		<-entered
	}
	// Waiting: for the node's turn, and for the server (another node holds
	// the key), in Serialize and Exclusive.
	nop := func(context.Context, pgx.Tx) (int, error) { return 0, nil }
	waitCtx, cancel := context.WithTimeout(ctx, bounded)
	defer cancel()
	run("turn", func() (error, error) { _, err := runSerialize(waitCtx, s, heeds, nop); return err, nil })
	run("server", func() (error, error) { _, err := runSerialize(waitCtx, s, remote, nop); return err, nil })
	run("exclusive server", func() (error, error) {
		_, err := runExclusive(waitCtx, s, remote, func(context.Context, *pgx.Conn) (int, error) { return 0, nil })
		return err, nil
	})
	waitFor(t, "the waiters wait", func() bool {
		_, waiting := serialLockCount(ctx, t, admin, remoteID)
		return serialQueued(s, serialLockID(t, s, heeds)) == 2 && waiting+serialQueued(s, remoteID)-1 == 2
	})

	start := time.Now()
	require.NoError(t, s.Close())
	elapsed := time.Since(start)
	t.Logf("Close took %v (Timeout %v)", elapsed, timeout)
	require.LessOrEqual(t, elapsed, timeout, "Close waited past its Timeout")

	for _, name := range []string{"heeds", "job", "turn", "server", "exclusive server"} {
		select {
		case r := <-results[name]:
			require.ErrorIs(t, r.err, lockstore.ErrClosed, name)
			if name == "heeds" || name == "job" {
				require.ErrorIs(t, r.cause, lockstore.ErrClosed, name)
			}
		case <-time.After(bounded):
			t.Fatalf("%s: still running after Close returned", name)
		}
	}
	// Nothing committed, and the ignoring fn's transaction is gone with
	// its session: its lock is free although its fn still runs.
	require.Zero(t, counterValue(ctx, t, admin, "heeds"))
	require.Zero(t, counterValue(ctx, t, admin, "ignores"))
	waitFor(t, "the ignoring fn's session ends", func() bool {
		granted, _ := serialLockCount(ctx, t, admin, ignoresID)
		return granted == 0
	})
	release()
	r := <-results["ignores"]
	require.ErrorIs(t, r.err, lockstore.ErrClosed)
	require.ErrorIs(t, r.cause, lockstore.ErrClosed)
	require.Zero(t, counterValue(ctx, t, admin, "ignores"), "a transaction committed after Close returned")
}
