package postgres

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/claimbus/claimbus/internal/pgtest"
	"github.com/claimbus/claimbus/lockstore"
)

// ownLocks counts the advisory locks the sessions of s hold, from pg_locks.
func ownLocks(ctx context.Context, t *testing.T, admin *pgx.Conn, s *Store) int {
	t.Helper()
	backends := lockBackends(ctx, t, admin)
	n := 0
	for _, c := range s.lockConns() {
		c.mu.Lock()
		n += backends[c.pid]
		c.mu.Unlock()
	}
	return n
}

func capKey(i int) lockstore.Key { return lockstore.Key{Namespace: "cap", ID: fmt.Sprint(i)} }

// adminStore returns a store with cfg on a pool of 2 connections, and an
// administrator's connection to the same database.
func adminStore(t *testing.T, cfg Config) (*Store, *pgx.Conn) {
	dsn := pgtest.DSN(t)
	admin := serialAdmin(t, dsn)
	return newTestStore(t, pgtest.Connect(t, dsn, pgtest.PoolConfig{MaxConns: 2}), cfg), admin
}

// TestMaxHeldRefusesOneRequest: past Config.MaxHeld a TryLock or Lock
// fails alone with ErrCapacity; the held locks stay held.
func TestMaxHeldRefusesOneRequest(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	s, admin := adminStore(t, Config{MaxHeld: 20})

	var locks []lockstore.Lock
	for i := range 20 {
		l, err := s.TryLock(ctx, capKey(i))
		require.NoError(t, err)
		locks = append(locks, l)
	}
	_, err := s.TryLock(ctx, capKey(20))
	require.ErrorIs(t, err, lockstore.ErrCapacity)
	require.ErrorContains(t, err, "MaxHeld")
	_, err = s.Lock(ctx, capKey(21))
	require.ErrorIs(t, err, lockstore.ErrCapacity)
	st := s.Stats()
	require.EqualValues(t, 2, st.CapacityRefusals, "Stats counts both refusals")
	require.EqualValues(t, 20, st.Held)
	for _, l := range locks {
		requireOpen(t, l.Lost())
	}
	require.Equal(t, 20, ownLocks(ctx, t, admin, s))

	// Room again once one is released; the refused keys left no trace.
	require.NoError(t, locks[0].Release(ctx))
	l, err := s.TryLock(ctx, capKey(20))
	require.NoError(t, err)
	require.Zero(t, s.Waiting(capKey(21)))
	require.NoError(t, l.Release(ctx))
	for _, l := range locks[1:] {
		require.NoError(t, l.Release(ctx))
	}
	require.Zero(t, ownLocks(ctx, t, admin, s))
}

// TestServerLockTableFull: when the server's lock table is full ("out of
// shared memory"), the requests that found no room fail with ErrCapacity,
// in batches that also carry other locks' unlocks, and every other lock
// stays held: the connection is not dropped.
func TestServerLockTableFull(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	cluster := pgtest.NewCluster(t)
	func() {
		admin := serialAdmin(t, cluster.DSN())
		for _, q := range []string{
			"ALTER SYSTEM SET max_locks_per_transaction = 10",
			"ALTER SYSTEM SET max_connections = 20",
		} {
			_, err := admin.Exec(ctx, q)
			require.NoError(t, err)
		}
	}()
	require.NoError(t, cluster.Restart(ctx))
	admin := serialAdmin(t, cluster.DSN())
	pool := pgtest.Connect(t, cluster.DSN(), pgtest.PoolConfig{MaxConns: 2})
	// MaxHeld and LocksPerConn out of the way: the server's table is the
	// limit, and every lock lives on one connection.
	s := newTestStore(t, pool, Config{LockConns: 1, MaxHeld: 1 << 20, LocksPerConn: 1 << 20})
	conn := s.lockConns()[0]
	pid := connPIDs(s)[0]

	// Fill the table from 16 goroutines, each until it is refused.
	var (
		mu     sync.Mutex
		held   []lockstore.Lock
		capErr error
		fill   sync.WaitGroup
	)
	for g := range 16 {
		fill.Go(func() {
			for i := 0; ; i++ {
				if i == 10_000 {
					t.Error("the lock table never filled")
					return
				}
				l, err := s.TryLock(ctx, capKey(g*10_000+i))
				mu.Lock()
				switch {
				case errors.Is(err, lockstore.ErrCapacity):
					capErr = err
				case err != nil:
					t.Error(err)
				default:
					held = append(held, l)
				}
				mu.Unlock()
				if err != nil {
					return
				}
			}
		})
	}
	fill.Wait()
	require.Error(t, capErr)
	t.Logf("the server's lock table took %d locks; then: %v", len(held), capErr)
	require.ErrorContains(t, capErr, "max_locks_per_transaction")
	require.Equal(t, pid, connPIDs(s)[0], "the lock connection was kept")
	for _, l := range held {
		requireOpen(t, l.Lost())
	}
	// The admin's own query needs room in the table too.
	const room = 100
	releaseSome := func(locks []lockstore.Lock) []lockstore.Lock {
		for _, l := range locks[:room] {
			require.NoError(t, l.Release(ctx))
		}
		return locks[room:]
	}
	held = releaseSome(held)
	require.Equal(t, len(held), ownLocks(ctx, t, admin, s))

	// Mixed batches at the limit: releases of held locks and new tries
	// from many goroutines. Every release succeeds, every try either gets
	// a lock or ErrCapacity, and nothing else is lost.
	var wg sync.WaitGroup
	errs := make(chan error, 2*len(held))
	got := make(chan lockstore.Lock, len(held))
	for i, l := range held[:len(held)/2] {
		wg.Go(func() {
			if err := l.Release(ctx); err != nil {
				errs <- fmt.Errorf("release: %w", err)
			}
		})
		wg.Go(func() {
			l, err := s.TryLock(ctx, capKey(1_000_000+i))
			switch {
			case err == nil:
				got <- l
			case !errors.Is(err, lockstore.ErrCapacity):
				errs <- fmt.Errorf("try: %w", err)
			}
		})
	}
	wg.Wait()
	close(errs)
	close(got)
	for err := range errs {
		t.Error(err)
	}
	kept := held[len(held)/2:]
	for l := range got {
		kept = append(kept, l)
	}
	for _, l := range kept {
		requireOpen(t, l.Lost())
	}
	require.Equal(t, pid, connPIDs(s)[0], "the lock connection was kept")
	kept = releaseSome(kept)
	require.Equal(t, len(kept), ownLocks(ctx, t, admin, s))
	t.Logf("round trips %d, requests %d", conn.roundTrips.Load(), conn.requests.Load())
	for _, l := range kept {
		require.NoError(t, l.Release(ctx))
	}
	require.Zero(t, ownLocks(ctx, t, admin, s))
}

// TestLockConnsGrowAndShrink: past LocksPerConn on every active
// connection, the store opens another for new grants, and closes it again
// once it holds nothing.
func TestLockConnsGrowAndShrink(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	s, admin := adminStore(t, Config{LockConns: 2, LocksPerConn: 10, MaxHeld: 100, KeepAlive: 20 * time.Millisecond})

	// ready: two connections take new grants (rebalance opens more until
	// LockConns do), and none of them is full.
	ready := func() bool {
		active := *s.active.Load()
		for _, c := range active {
			if c.full.Load() {
				return false
			}
		}
		return len(active) == 2
	}
	full := func() map[*lockConn]bool {
		m := map[*lockConn]bool{}
		for _, c := range s.lockConns() {
			if c.full.Load() {
				m[c] = true
			}
		}
		return m
	}
	var locks []lockstore.Lock
	take := func(n int) []lockstore.Lock {
		var got []lockstore.Lock
		for range n {
			l, err := s.TryLock(ctx, capKey(len(locks)))
			require.NoError(t, err)
			locks = append(locks, l)
			got = append(got, l)
		}
		return got
	}
	// Six rounds of 10 at 10 a connection: rounds fill connections, the
	// store opens others, and the next round's grants never go to one that
	// was full when it began. A round takes no more than one connection
	// holds: with more, the hash could fill both active connections while
	// the next is still opening, and the grants between then fall back on
	// the base connections, full or not (see rebalance).
	for round := range 6 {
		waitFor(t, "two lock connections taking grants", ready)
		wasFull := full()
		for _, l := range take(10) {
			require.False(t, wasFull[l.(*pgLock).c], "round %d: a grant went to a full connection", round)
		}
	}
	require.Greater(t, len(s.lockConns()), 2, "the store opened lock connections")
	// The last round may have filled a connection: the one opening then
	// holds the epoch's advisory lock for a moment (see epoch.go), which
	// ownLocks would count once its pid is known.
	waitFor(t, "two lock connections taking grants", ready)
	require.Equal(t, 60, ownLocks(ctx, t, admin, s))

	// Tokens still rise per key across connections.
	require.NoError(t, locks[0].Release(ctx))
	again, err := s.TryLock(ctx, capKey(0))
	require.NoError(t, err)
	require.Greater(t, again.Token(), locks[59].Token())
	require.LessOrEqual(t, len(s.lockConns()), 2+(100+9)/10, "at most MaxHeld/LocksPerConn extra")
	locks[0] = again

	for _, l := range locks {
		require.NoError(t, l.Release(ctx))
	}
	waitFor(t, "extra lock connections closed", func() bool { return len(s.lockConns()) == 2 })
	require.Zero(t, ownLocks(ctx, t, admin, s))
	l, err := s.TryLock(ctx, capKey(0))
	require.NoError(t, err)
	require.NoError(t, l.Release(ctx))
}

// TestTryLockRacingCloseOnARetiredConnection: a TryLock whose only active
// connection, an extra one, retired while the store began to close (the
// active set no longer changes then) returns ErrClosed once Close runs; it
// does not retry that connection for ever.
func TestTryLockRacingCloseOnARetiredConnection(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	s, admin := adminStore(t, Config{LockConns: 1, LocksPerConn: 1, MaxHeld: 10})

	// The base connection is full with one lock: an extra one opens and
	// takes the new grants alone.
	_, err := s.TryLock(ctx, capKey(0))
	require.NoError(t, err)
	var extra *lockConn
	waitFor(t, "an extra connection taking grants", func() bool {
		active := *s.active.Load()
		if len(active) != 1 || active[0].base {
			return false
		}
		extra = active[0]
		return extra.avail.Load() != connDown
	})

	// Close has begun (no connection opens, the active set stays), and
	// the extra connection's session ends: it retires.
	s.connsMu.Lock()
	s.closing = true
	s.connsMu.Unlock()
	extra.mu.Lock()
	pid := extra.pid
	extra.mu.Unlock()
	terminateBackend(ctx, t, admin, pid)
	waitFor(t, "the extra connection retired", func() bool {
		extra.mu.Lock()
		defer extra.mu.Unlock()
		return extra.retired
	})

	done := make(chan error, 1)
	go func() {
		_, err := s.TryLock(ctx, capKey(1))
		done <- err
	}()
	// The TryLock counts in held once it tries a connection.
	waitFor(t, "the TryLock trying a connection", func() bool { return s.held.Load() == 2 })
	require.NoError(t, s.Close())
	select {
	case err := <-done:
		require.ErrorIs(t, err, lockstore.ErrClosed)
	case <-time.After(10 * time.Second):
		t.Fatal("the TryLock still retries the retired connection after Close")
	}
}
