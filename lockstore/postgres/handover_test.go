package postgres

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/claimbus/claimbus/internal/pgtest"
	"github.com/claimbus/claimbus/internal/testwait"
	"github.com/claimbus/claimbus/lockstore"
)

// awaitErr waits for an error on errs, failing t after 20 seconds (a
// Release that never returns is a defect, not a slow test).
func awaitErr(t *testing.T, errs <-chan error, what string) error {
	t.Helper()
	return testwait.Recv(t, errs, 20*time.Second, "%s's result", what)
}

// freeOn waits until other, another store on the same database, takes key,
// and releases it: the server no longer holds it for anyone.
func freeOn(ctx context.Context, t *testing.T, other *Store, key lockstore.Key) {
	t.Helper()
	waitFor(t, fmt.Sprintf("another store takes %s", key), func() bool {
		l, err := other.TryLock(ctx, key)
		if errors.Is(err, lockstore.ErrLocked) {
			return false
		}
		require.NoError(t, err)
		require.NoError(t, l.Release(ctx))
		return true
	})
}

// stallTokens makes the next nextval on the token sequence wait: the
// returned transaction holds ACCESS EXCLUSIVE on it until its commit (see
// TestCancelledCallersLateGrantIsUnlocked).
func stallTokens(ctx context.Context, t *testing.T, admin *pgx.Conn) pgx.Tx {
	t.Helper()
	tx, err := admin.Begin(ctx)
	require.NoError(t, err)
	t.Cleanup(func() { _ = tx.Rollback(context.Background()) })
	_, err = tx.Exec(ctx, `ALTER SEQUENCE claimbus.lock_token NO CYCLE`)
	require.NoError(t, err)
	return tx
}

// waitBlocked waits until backend pid waits on a lock (the stalled
// sequence).
func waitBlocked(ctx context.Context, t *testing.T, tx pgx.Tx, pid uint32) {
	t.Helper()
	waitFor(t, "the round trip blocked on nextval", func() bool {
		var n int
		require.NoError(t, tx.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE pid = $1 AND wait_event_type = 'Lock'`, pid).Scan(&n))
		return n == 1
	})
}

// TestHandoverHotKey64: 64 goroutines contend one key on one node. Grants
// are handed over in place, one holder at a time, and every grant's token
// is greater than the one before it.
func TestHandoverHotKey64(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	_, s, other := twoNodes(t, Config{})
	key := lockstore.Key{Namespace: "handover", ID: "hot64"}
	const goroutines, rounds = 64, 20
	var (
		mu     sync.Mutex
		tokens []int64
		inside atomic.Int32
	)
	errs := make(chan error, goroutines)
	var wg sync.WaitGroup
	for range goroutines {
		wg.Go(func() {
			for range rounds {
				l, err := s.Lock(ctx, key)
				if err != nil {
					errs <- err
					return
				}
				if inside.Add(1) != 1 {
					errs <- errors.New("two holders of one key")
				}
				mu.Lock()
				tokens = append(tokens, l.Token())
				mu.Unlock()
				inside.Add(-1)
				if err := l.Release(ctx); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	require.Len(t, tokens, goroutines*rounds)
	for i := 1; i < len(tokens); i++ {
		require.Greater(t, tokens[i], tokens[i-1], "grant %d", i)
	}
	st := s.Stats()
	require.Positive(t, st.Handovers, "grants were handed over in place")
	require.Less(t, st.Handovers, int64(goroutines*rounds), "the first grant is no handover")
	require.Zero(t, st.Held)
	require.Zero(t, st.LocksLost)
	t.Logf("%d of %d grants handed over in place, %d round trips", st.Handovers, goroutines*rounds, st.RoundTrips)
	freeOn(ctx, t, other, key)
}

// TestHandoverFIFO: waiters queued behind a holder are handed the key in
// the order they queued, each in place, with growing tokens.
func TestHandoverFIFO(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	_, s, other := twoNodes(t, Config{})
	key := lockstore.Key{Namespace: "handover", ID: "fifo"}
	holder, err := s.TryLock(ctx, key)
	require.NoError(t, err)
	const waiters = 8
	type grant struct {
		index int
		token int64
	}
	grants := make(chan grant, waiters)
	errs := make(chan error, waiters)
	var wg sync.WaitGroup
	for i := range waiters {
		wg.Go(func() {
			l, err := s.Lock(ctx, key)
			if err != nil {
				errs <- err
				return
			}
			grants <- grant{i, l.Token()}
			errs <- l.Release(ctx)
		})
		waitFor(t, "waiter queued", func() bool { return s.Waiting(key) == i+1 })
	}
	require.NoError(t, holder.Release(ctx))
	requireNoErrors(t, &wg, errs)
	close(grants)
	last, next := holder.Token(), 0
	for g := range grants {
		require.Equal(t, next, g.index, "grants in queue order")
		require.Greater(t, g.token, last)
		next++
		last = g.token
	}
	require.Equal(t, waiters, next)
	require.EqualValues(t, waiters, s.Stats().Handovers, "every waiter was handed the key in place")
	freeOn(ctx, t, other, key)
}

// TestHandoverToAnotherKeyOfTheLockID: a waiter for another key of the
// same lock id is handed the lock in place, with its own key.
func TestHandoverToAnotherKeyOfTheLockID(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	_, s, other := twoNodes(t, Config{})
	a, b := collidingIDs(t)
	ka := lockstore.Key{Namespace: "handover", ID: a}
	kb := lockstore.Key{Namespace: "handover", ID: b}
	holder, err := s.TryLock(ctx, ka)
	require.NoError(t, err)
	type result struct {
		l   lockstore.Lock
		err error
	}
	waited := make(chan result, 1)
	go func() {
		l, err := s.Lock(ctx, kb)
		waited <- result{l, err}
	}()
	waitFor(t, "waiter queued", func() bool { return s.Waiting(kb) == 1 })
	require.NoError(t, holder.Release(ctx))
	w := <-waited
	require.NoError(t, w.err)
	require.Equal(t, kb, w.l.Key())
	require.Greater(t, w.l.Token(), holder.Token())
	require.EqualValues(t, 1, s.Stats().Handovers)
	_, err = other.TryLock(ctx, ka)
	require.ErrorIs(t, err, lockstore.ErrLocked, "the lock id stayed held")
	require.NoError(t, w.l.Release(ctx))
	freeOn(ctx, t, other, ka)
}

// TestHandoverToNobodyUnlocks: a holder recorded its release in place, but
// its waiter gave up before the turn reached it (here: none waits as the
// turn passes). The pass keeps the turn, unlocks on the server, and the
// release succeeds; another store takes the key.
func TestHandoverToNobodyUnlocks(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	_, s, other := twoNodes(t, Config{})
	key := lockstore.Key{Namespace: "handover", ID: "nobody"}
	lk, err := s.TryLock(ctx, key)
	require.NoError(t, err)
	l := lk.(*pgLock)
	// What Release does once it has seen a waiter.
	require.True(t, l.state.CompareAndSwap(lockHeld, lockReleasing))
	r := &request{kind: unlockRequest, id: l.id, lock: l, done: make(chan struct{})}
	require.True(t, l.c.handOver(r))
	s.queue.pass(l.id)
	errs := make(chan error, 1)
	go func() { <-r.done; errs <- r.err }()
	require.NoError(t, awaitErr(t, errs, "the release"))
	require.Zero(t, s.Stats().Handovers)
	require.Zero(t, s.handoffs.pending.Load())
	freeOn(ctx, t, other, key)
	// The turn passed with the unlock: the store takes the key again.
	l2, err := s.TryLock(ctx, key)
	require.NoError(t, err)
	require.NoError(t, l2.Release(ctx))
}

// midRenew is a handover stalled on the server: node a's holder released
// its key, and its waiter's renew, which carries the release, waits on
// nextval (the token sequence is locked by tx).
type midRenew struct {
	s, other *Store
	admin    *pgx.Conn
	tx       pgx.Tx
	key      lockstore.Key
	holder   lockstore.Lock
	pid      uint32     // the backend of node a's one lock connection
	released chan error // the holder's Release
	waited   chan error // the waiter's Lock (a grant is an error too)
}

// stallRenew sets up a midRenew on key, the waiter's Lock under waitCtx.
func stallRenew(ctx, waitCtx context.Context, t *testing.T, key lockstore.Key) *midRenew {
	t.Helper()
	dsn, s, other := twoNodesLongLease(t)
	m := &midRenew{s: s, other: other, admin: serialAdmin(t, dsn), key: key,
		released: make(chan error, 1), waited: make(chan error, 1)}
	var err error
	m.holder, err = s.TryLock(ctx, key)
	require.NoError(t, err)
	m.pid = connPIDs(s)[0]
	go func() {
		l, err := s.Lock(waitCtx, key)
		if err == nil {
			err = errors.Join(errors.New("granted"), l.Release(ctx))
		}
		m.waited <- err
	}()
	waitFor(t, "waiter queued", func() bool { return s.Waiting(key) == 1 })
	m.tx = stallTokens(ctx, t, m.admin)
	go func() { m.released <- m.holder.Release(ctx) }()
	waitBlocked(ctx, t, m.tx, m.pid)
	return m
}

// TestHandoverWaiterAbandonsMidRenew: the waiter gives up while its renew,
// which carries the holder's release, is on the server. The release
// succeeds, the grant nobody wants is unlocked, and the key is free.
func TestHandoverWaiterAbandonsMidRenew(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	callCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	m := stallRenew(ctx, callCtx, t, lockstore.Key{Namespace: "handover", ID: "abandon"})
	cancel()
	require.ErrorIs(t, awaitErr(t, m.waited, "the waiter"), context.Canceled)
	require.NoError(t, m.tx.Commit(ctx))
	require.NoError(t, awaitErr(t, m.released, "the holder's release"), "the renew confirmed the release")
	require.EqualValues(t, 1, m.s.Stats().Handovers)
	freeOn(ctx, t, m.other, m.key)
	require.Equal(t, m.pid, connPIDs(m.s)[0], "the connection survived")
}

// twoNodesLongLease is twoNodes with one lock connection on node a and a
// lease long enough that a round trip stalled on purpose never costs the
// connection.
func twoNodesLongLease(t *testing.T) (dsn string, a, b *Store) {
	t.Helper()
	dsn = pgtest.DSN(t)
	pa := pgtest.Connect(t, dsn, pgtest.PoolConfig{MaxConns: 2, ApplicationName: "node-a"})
	pb := pgtest.Connect(t, dsn, pgtest.PoolConfig{MaxConns: 2, ApplicationName: "node-b"})
	a = newTestStore(t, pa, Config{LockConns: 1, LeaseBound: time.Minute, Timeout: 30 * time.Second})
	return dsn, a, newTestStore(t, pb, Config{})
}

// TestHandoverConnectionKilledMidRenew: the lock connection is terminated
// while the renew carrying the holder's release is on the server. The
// release fails with ErrLockLost, the waiter with ErrUnavailable, and the
// key is free (the server freed it with the session).
func TestHandoverConnectionKilledMidRenew(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	m := stallRenew(ctx, ctx, t, lockstore.Key{Namespace: "handover", ID: "killed-renew"})
	terminateBackend(ctx, t, m.admin, m.pid)
	require.ErrorIs(t, awaitErr(t, m.released, "the holder's release"), lockstore.ErrLockLost)
	require.ErrorIs(t, awaitErr(t, m.waited, "the waiter"), lockstore.ErrUnavailable)
	require.NoError(t, m.tx.Commit(ctx))
	require.Zero(t, m.s.Stats().Handovers)
	require.Zero(t, m.s.handoffs.pending.Load())
	freeOn(ctx, t, m.other, m.key)
	waitFor(t, "reconnected", func() bool { return allUp(m.s) })
	l, err := m.s.Lock(ctx, m.key)
	require.NoError(t, err)
	require.Greater(t, l.Token(), m.holder.Token())
	require.NoError(t, l.Release(ctx))
}

// TestHandoverConnectionKilledBeforeRenew: the lock connection is
// terminated while a release waits in place for the waiter to claim it.
// The release fails with ErrLockLost; the waiter, once the turn reaches
// it, gets an error or a fresh grant (a greater token) after the
// reconnect.
func TestHandoverConnectionKilledBeforeRenew(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	dsn, s, other := twoNodesLongLease(t)
	admin := serialAdmin(t, dsn)
	key := lockstore.Key{Namespace: "handover", ID: "killed-pending"}
	lk, err := s.TryLock(ctx, key)
	require.NoError(t, err)
	l := lk.(*pgLock)
	pid := connPIDs(s)[0]

	type result struct {
		l   lockstore.Lock
		err error
	}
	waited := make(chan result, 1)
	go func() {
		wl, err := s.Lock(ctx, key)
		waited <- result{wl, err}
	}()
	waitFor(t, "waiter queued", func() bool { return s.Waiting(key) == 1 })
	// What Release does, up to the pass: the release waits in place.
	require.True(t, l.state.CompareAndSwap(lockHeld, lockReleasing))
	r := &request{kind: unlockRequest, id: l.id, lock: l, done: make(chan struct{})}
	require.True(t, l.c.handOver(r))
	terminateBackend(ctx, t, admin, pid)
	released := make(chan error, 1)
	go func() { <-r.done; released <- r.err }()
	require.ErrorIs(t, awaitErr(t, released, "the holder's release"), lockstore.ErrLockLost)
	require.Zero(t, s.handoffs.pending.Load(), "the connection's drop took the release")
	freeOn(ctx, t, other, key)
	s.queue.pass(l.id)
	if w := testwait.Recv(t, waited, 20*time.Second, "the waiter's turn"); w.err != nil {
		require.ErrorIs(t, w.err, lockstore.ErrUnavailable)
	} else {
		require.Greater(t, w.l.Token(), l.Token())
		require.NoError(t, w.l.Release(ctx))
	}
	require.Zero(t, s.Stats().Handovers)
	waitFor(t, "reconnected", func() bool { return allUp(s) })
	freeOn(ctx, t, other, key)
}

// TestHandoverClose: Close in the middle of a storm of handovers. Every
// Lock and Release returns (a release that was waiting in place fails with
// ErrLockLost), and the server holds nothing of the store.
func TestHandoverClose(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	dsn := pgtest.DSN(t)
	pool := pgtest.Connect(t, dsn, pgtest.PoolConfig{MaxConns: 2, ApplicationName: "node-close"})
	s, err := New(ctx, pool, Config{})
	require.NoError(t, err)
	other := newTestStore(t, pgtest.Connect(t, dsn, pgtest.PoolConfig{MaxConns: 2, ApplicationName: "node-other"}), Config{})
	key := lockstore.Key{Namespace: "handover", ID: "close"}
	const goroutines = 16
	errs := make(chan error, goroutines)
	var wg sync.WaitGroup
	for range goroutines {
		wg.Go(func() {
			for {
				l, err := s.Lock(ctx, key)
				if err != nil {
					if !errors.Is(err, lockstore.ErrClosed) {
						errs <- fmt.Errorf("lock: %w", err)
					}
					return
				}
				if err := l.Release(ctx); err != nil {
					if !errors.Is(err, lockstore.ErrLockLost) || !errors.Is(err, lockstore.ErrClosed) {
						errs <- fmt.Errorf("release: %w", err)
					}
					return
				}
			}
		})
	}
	waitFor(t, "handovers", func() bool { return s.Stats().Handovers > 100 })
	require.NoError(t, s.Close())
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	require.Zero(t, s.handoffs.pending.Load())
	freeOn(ctx, t, other, key)
}

// TestHandoverBound: while waiters of this node keep a key busy, a session
// waiting for it on the server (pg_advisory_lock, queued there) gets it
// within maxHandovers grants: then a release unlocks on the server, which
// grants the key to its first waiter at once.
func TestHandoverBound(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	dsn := pgtest.DSN(t)
	s := newTestStore(t, pgtest.Connect(t, dsn, pgtest.PoolConfig{MaxConns: 2, ApplicationName: "node-bound"}), Config{PollInterval: 2 * time.Millisecond})
	key := lockstore.Key{Namespace: "handover", ID: "bound"}
	id, err := s.lockID(key)
	require.NoError(t, err)

	var grants atomic.Int64
	stop := make(chan struct{})
	errs := make(chan error, 8)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				l, err := s.Lock(ctx, key)
				if err != nil {
					errs <- err
					return
				}
				grants.Add(1)
				if err := l.Release(ctx); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	defer func() {
		close(stop)
		wg.Wait()
		close(errs)
		for err := range errs {
			require.NoError(t, err)
		}
	}()
	waitFor(t, "handovers", func() bool { return s.Stats().Handovers > 2*maxHandovers })

	waiter, watcher := serialAdmin(t, dsn), serialAdmin(t, dsn)
	waiterPID := waiter.PgConn().PID()
	got := make(chan int64, 1)
	go func() {
		_, err := waiter.Exec(ctx, `SELECT pg_advisory_lock($1, $2)`, id.Namespace, id.ID)
		if err != nil {
			t.Error(err)
		}
		got <- grants.Load()
	}()
	defer func() {
		// Whatever the outcome, the node's claimants get the key back.
		_, err := waiter.Exec(ctx, `SELECT pg_advisory_unlock($1, $2)`, id.Namespace, id.ID)
		require.NoError(t, err)
	}()
	// The bound counts from the moment the session is seen waiting in the
	// server's queue: before that its request may still be on its way,
	// however long the machine takes to send it. A session granted before
	// it is seen waiting met the bound trivially.
	var startedAt, grantedAt int64
	early := false
	waitFor(t, "the session waits on the server, or has the key", func() bool {
		select {
		case grantedAt = <-got:
			early = true
			return true
		default:
		}
		var n int
		require.NoError(t, watcher.QueryRow(ctx, `SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted AND pid = $1`,
			waiterPID).Scan(&n))
		startedAt = grants.Load()
		return n == 1
	})
	if early {
		t.Logf("the session got the key before it was seen waiting")
		return
	}
	select {
	case grantedAt = <-got:
	case <-time.After(20 * time.Second):
		t.Fatalf("the server's waiter did not get the key in 20s (%d grants on the node meanwhile)", grants.Load()-startedAt)
	}
	require.LessOrEqual(t, grantedAt-startedAt, int64(maxHandovers+16), "grants on the node while the session waited")
	t.Logf("the session waiting on the server got the key after %d grants on the node", grantedAt-startedAt)
}

// TestHandoverRenewOnAnotherBackend: a renew that runs on a backend other
// than the one the connection knows (the session is in doubt) confirms
// nothing: the holder's release fails with ErrLockLost, the waiter with
// ErrUnavailable, and the connection is replaced, which frees the key.
func TestHandoverRenewOnAnotherBackend(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	_, s, other := twoNodesLongLease(t)
	key := lockstore.Key{Namespace: "handover", ID: "other-backend"}
	holder, err := s.TryLock(ctx, key)
	require.NoError(t, err)
	waited := make(chan error, 1)
	go func() {
		l, err := s.Lock(ctx, key)
		if err == nil {
			err = errors.Join(errors.New("granted"), l.Release(ctx))
		}
		waited <- err
	}()
	waitFor(t, "waiter queued", func() bool { return s.Waiting(key) == 1 })
	c := holder.(*pgLock).c
	c.mu.Lock()
	c.pid++ // what the connection believes its backend is
	c.mu.Unlock()
	require.ErrorIs(t, holder.Release(ctx), lockstore.ErrLockLost)
	require.ErrorIs(t, awaitErr(t, waited, "the waiter"), lockstore.ErrUnavailable)
	require.Zero(t, s.Stats().Handovers)
	freeOn(ctx, t, other, key)
}
