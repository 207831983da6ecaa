package postgres

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/claimbus/claimbus/internal/lockext"
	"github.com/claimbus/claimbus/internal/pgtest"
	"github.com/claimbus/claimbus/internal/testwait"
	"github.com/claimbus/claimbus/lockstore"
	"github.com/claimbus/claimbus/lockstore/lockstoretest"
)

// newLazyStore opens a store with one lock connection, so that every
// request shares it, whose lazy unlocks wait an hour for company: only a
// lock request, a Release, Close or the connection's next ping (keepAlive
// after its last round trip) sends them.
func newLazyStore(t *testing.T, dsn, name string, keepAlive time.Duration) *Store {
	t.Helper()
	cfg := Config{LockConns: 1, KeepAlive: keepAlive, PollInterval: 5 * time.Millisecond}
	if keepAlive >= defaultLeaseBound/4 {
		cfg.LeaseBound = 4 * keepAlive
	}
	s := newTestStore(t, pgtest.Connect(t, dsn, pgtest.PoolConfig{MaxConns: 2, ApplicationName: name}), cfg)
	s.lazyDelay = time.Hour
	return s
}

// releasedLater releases l with ReleaseLater and returns the channel its
// done sends on (requireDone fails if done has been called twice by then).
func releasedLater(t *testing.T, l lockstore.Lock) <-chan error {
	t.Helper()
	done := make(chan error, 2)
	lockext.ReleaseLater(context.Background(), l, func(err error) { done <- err })
	return done
}

// requireDone waits for the result of a ReleaseLater.
func requireDone(t *testing.T, done <-chan error) error {
	t.Helper()
	err := testwait.Recv(t, done, 20*time.Second, "ReleaseLater's done")
	require.Empty(t, done, "done called twice")
	return err
}

// TestReleaseLaterRidesTheNextLock: an unlock of ReleaseLater waits for
// the next lock request of its connection and goes in the same round
// trip, which confirms it (done(nil)) before that lock is granted; until
// then the key stays held, on this node and for another.
func TestReleaseLaterRidesTheNextLock(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	dsn := pgtest.DSN(t)
	s := newLazyStore(t, dsn, "later-a", time.Minute) // no ping sends the unlock while the test looks
	other := newTestStore(t, pgtest.Connect(t, dsn, pgtest.PoolConfig{MaxConns: 2, ApplicationName: "later-b"}), Config{})
	key := lockstore.Key{Namespace: "later", ID: "1"}

	l, err := s.TryLock(ctx, key)
	require.NoError(t, err)
	done := releasedLater(t, l)
	require.NoError(t, l.Release(ctx), "Release after ReleaseLater returns nil at once")
	_, err = other.TryLock(ctx, key)
	require.ErrorIs(t, err, lockstore.ErrLocked, "the unlock has not been sent: the key is still held on the server")
	_, err = s.TryLock(ctx, key)
	require.ErrorIs(t, err, lockstore.ErrLocked, "nor is it free on this node before the unlock is confirmed")
	require.Empty(t, done)

	before := s.Stats()
	next, err := s.TryLock(ctx, lockstore.Key{Namespace: "later", ID: "2"})
	require.NoError(t, err)
	require.Len(t, done, 1, "done ran before the lock that carried the unlock was granted")
	require.NoError(t, requireDone(t, done))
	after := s.Stats()
	require.Equal(t, before.RoundTrips+1, after.RoundTrips, "one round trip for the unlock and the lock")
	require.Equal(t, before.BatchedRequests+2, after.BatchedRequests)

	l2, err := other.TryLock(ctx, key)
	require.NoError(t, err, "the key is free once done has run")
	require.NoError(t, l2.Release(ctx))
	require.NoError(t, next.Release(ctx))
}

// TestReleaseLaterGoesAloneWithinTheDelay: with nothing to ride with, a
// lazy unlock is sent on its own once the delay has passed, long before
// the connection's next ping (a minute) would carry it.
func TestReleaseLaterGoesAloneWithinTheDelay(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	s := newTestStore(t, pgtest.Connect(t, pgtest.DSN(t), pgtest.PoolConfig{MaxConns: 2, ApplicationName: "later-alone"}),
		Config{KeepAlive: time.Minute, LeaseBound: 4 * time.Minute})
	l, err := s.TryLock(ctx, lockstore.Key{Namespace: "later", ID: "alone"})
	require.NoError(t, err)
	start := time.Now()
	require.NoError(t, requireDone(t, releasedLater(t, l)))
	t.Logf("a lone lazy unlock was confirmed after %v (delay %v)", time.Since(start), lazyUnlockDelay)
	l2, err := s.TryLock(ctx, lockstore.Key{Namespace: "later", ID: "alone"})
	require.NoError(t, err)
	require.NoError(t, l2.Release(ctx))
}

// TestReleaseLaterWithAWaiterGoesAtOnce: a lazy unlock of a key a claimant
// of this node waits for is sent at once: the waiter gets the key without
// waiting for company.
func TestReleaseLaterWithAWaiterGoesAtOnce(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	s := newLazyStore(t, pgtest.DSN(t), "later-waiter", time.Minute)
	key := lockstore.Key{Namespace: "later", ID: "waited"}
	l, err := s.TryLock(ctx, key)
	require.NoError(t, err)
	got := make(chan error, 1)
	go func() {
		l2, err := s.Lock(ctx, key)
		if err == nil {
			err = l2.Release(ctx)
		}
		got <- err
	}()
	waitFor(t, "the waiter queued", func() bool { return s.Waiting(key) == 1 })
	require.NoError(t, requireDone(t, releasedLater(t, l)), "sent at once, not after the hour")
	require.NoError(t, <-got)
}

// TestCloseSendsLazyUnlocks: Close sends the unlocks still waiting for
// company: their locks are reported released, not lost.
func TestCloseSendsLazyUnlocks(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	dsn := pgtest.DSN(t)
	pool := pgtest.Connect(t, dsn, pgtest.PoolConfig{MaxConns: 2, ApplicationName: "later-close"})
	s, err := New(ctx, pool, Config{LockConns: 1})
	require.NoError(t, err)
	s.lazyDelay = time.Hour
	var dones []<-chan error
	for i := range 5 {
		l, err := s.TryLock(ctx, lockstore.Key{Namespace: "later", ID: fmt.Sprint(i)})
		require.NoError(t, err)
		dones = append(dones, releasedLater(t, l))
	}
	require.NoError(t, s.Close())
	for _, d := range dones {
		require.NoError(t, requireDone(t, d), "released before Close, so not lost")
	}
}

// TestReleaseLaterOnATerminatedConnection: a lazy unlock whose connection
// the server ends before it is sent reports the lock lost, once; the key is
// free for another node and, after the reconnect, for this one.
func TestReleaseLaterOnATerminatedConnection(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	dsn := pgtest.DSN(t)
	admin := serialAdmin(t, dsn)
	// No ping comes before the end of the test: the unlock waits for the
	// next request of its connection, sent below on the dead connection.
	s := newLazyStore(t, dsn, "later-term", time.Minute)
	other := newTestStore(t, pgtest.Connect(t, dsn, pgtest.PoolConfig{MaxConns: 2, ApplicationName: "later-term-b"}), Config{})
	key := lockstore.Key{Namespace: "later", ID: "term"}
	l, err := s.TryLock(ctx, key)
	require.NoError(t, err)
	done := releasedLater(t, l)

	terminateBackend(ctx, t, admin, connPIDs(s)[0])
	// The request carries the unlock; whether it fails too is not the point.
	if l, err := s.TryLock(ctx, lockstore.Key{Namespace: "later", ID: "carrier"}); err == nil {
		require.NoError(t, l.Release(ctx))
	}
	require.ErrorIs(t, requireDone(t, done), lockstore.ErrLockLost, "nothing confirmed it was held up to the unlock")

	l2, err := other.TryLock(ctx, key)
	require.NoError(t, err, "the server freed it with the session")
	require.NoError(t, l2.Release(ctx))
	waitFor(t, "the lock connection is back", func() bool { return allUp(s) })
	l3, err := s.TryLock(ctx, key)
	require.NoError(t, err)
	require.NoError(t, l3.Release(ctx))
}

// probeTableSQL creates the table the probes read.
const probeTableSQL = `CREATE TABLE probe_taken (v text PRIMARY KEY)`

// probeSQL is the probes' query: which of $1 are in probe_taken;
// probeBySQL also names who took each ("by-" and the value), and
// probeNullBySQL names nobody (NULL).
const (
	probeSQL       = `SELECT v FROM probe_taken WHERE v = ANY($1)`
	probeBySQL     = `SELECT v, 'by-' || v FROM probe_taken WHERE v = ANY($1)`
	probeNullBySQL = `SELECT v, NULL::text FROM probe_taken WHERE v = ANY($1)`
)

// TestTryLockProbe: the probe runs in the round trip that takes the key
// and sees what was committed before; many concurrent probes, batched
// together, each get their own value's answer, with the second column of
// its row when the probe has one (NULL read as empty); a key held
// elsewhere is ErrLocked as with TryLock.
func TestTryLockProbe(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	dsn := pgtest.DSN(t)
	pool := pgtest.Connect(t, dsn, pgtest.PoolConfig{MaxConns: 4, ApplicationName: "probe"})
	_, err := pool.Exec(ctx, probeTableSQL)
	require.NoError(t, err)
	s := newTestStore(t, pool, Config{})
	before := s.Stats()
	_, err = pool.Exec(ctx, `INSERT INTO probe_taken SELECT 'v' || i FROM generate_series(0, 199, 2) i`)
	require.NoError(t, err)

	var wg sync.WaitGroup
	errs := make(chan error, 2*200) // a wrong answer and the release's result each
	for i := range 200 {
		wg.Go(func() {
			v := fmt.Sprint("v", i)
			probe, by := lockext.Probe{SQL: probeSQL, Value: v}, ""
			switch i % 3 {
			case 1:
				probe.SQL, probe.By, by = probeBySQL, true, "by-"+v
			case 2:
				probe.SQL, probe.By = probeNullBySQL, true
			}
			want := lockext.Found{}
			if i%2 == 0 {
				want = lockext.Found{Taken: true, By: by}
			}
			l, found, err := s.TryLockProbe(ctx, lockstore.Key{Namespace: "probe", ID: v}, probe)
			if err != nil {
				errs <- err
				return
			}
			if found != want {
				errs <- fmt.Errorf("%s: found %+v, want %+v", v, found, want)
			}
			errs <- l.Release(ctx)
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	after := s.Stats()
	t.Logf("200 probed locks and their releases in %d round trips", after.RoundTrips-before.RoundTrips)
	require.Less(t, after.RoundTrips-before.RoundTrips, int64(400), "concurrent probed requests share round trips")

	other := newTestStore(t, pgtest.Connect(t, dsn, pgtest.PoolConfig{MaxConns: 2, ApplicationName: "probe-b"}), Config{})
	held, err := other.TryLock(ctx, lockstore.Key{Namespace: "probe", ID: "held"})
	require.NoError(t, err)
	_, _, err = s.TryLockProbe(ctx, lockstore.Key{Namespace: "probe", ID: "held"}, lockext.Probe{SQL: probeSQL, Value: "held"})
	require.ErrorIs(t, err, lockstore.ErrLocked)
	require.NoError(t, held.Release(ctx))

	_, _, err = s.TryLockProbe(ctx, lockstore.Key{Namespace: "probe", ID: "x"}, lockext.Probe{Value: "x"})
	require.ErrorIs(t, err, errEmptyProbe)
}

// TestTryLockProbeBySQLAndColumns: requests sharing a round trip and one
// SQL, read with and without its second column, are two queries: each
// request gets its own answer, whichever came first (read as one column,
// two columns do not scan: that request fails, alone).
func TestTryLockProbeBySQLAndColumns(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	pool := pgtest.Pool(t, pgtest.PoolConfig{MaxConns: 4})
	_, err := pool.Exec(ctx, probeTableSQL+`; INSERT INTO probe_taken SELECT 'w' || i FROM generate_series(0, 39) i`)
	require.NoError(t, err)
	s := newTestStore(t, pool, Config{LockConns: 1})

	var wg sync.WaitGroup
	errs := make([]error, 40)
	for i := range errs {
		wg.Go(func() {
			v := fmt.Sprint("w", i)
			by := i%2 == 0
			l, found, err := s.TryLockProbe(ctx, lockstore.Key{Namespace: "probe", ID: v}, lockext.Probe{SQL: probeBySQL, Value: v, By: by})
			switch {
			case !by && err == nil:
				errs[i] = errors.Join(fmt.Errorf("%s: two columns read as one, no error", v), l.Release(ctx))
			case !by:
			case err != nil:
				errs[i] = err
			case found != lockext.Found{Taken: true, By: "by-" + v}:
				errs[i] = errors.Join(fmt.Errorf("%s: found %+v", v, found), l.Release(ctx))
			default:
				errs[i] = l.Release(ctx)
			}
		})
	}
	wg.Wait()
	require.NoError(t, errors.Join(errs...))
}

// TestTryLockProbeFailing: a probe the server refuses fails its request,
// not the connection: no lock is returned, the key is unlocked, and the
// other requests of the store go on.
func TestTryLockProbeFailing(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	dsn := pgtest.DSN(t)
	s := newTestStore(t, pgtest.Connect(t, dsn, pgtest.PoolConfig{MaxConns: 2, ApplicationName: "probe-fail"}), Config{LockConns: 1})
	other := newTestStore(t, pgtest.Connect(t, dsn, pgtest.PoolConfig{MaxConns: 2, ApplicationName: "probe-fail-b"}), Config{})
	key := lockstore.Key{Namespace: "probe", ID: "missing"}
	pid := connPIDs(s)[0]

	l, _, err := s.TryLockProbe(ctx, key, lockext.Probe{SQL: `SELECT v FROM no_such_table WHERE v = ANY($1)`, Value: "missing"})
	require.Error(t, err)
	require.Nil(t, l)
	require.ErrorContains(t, err, "no_such_table")
	require.NotErrorIs(t, err, lockstore.ErrLocked)
	require.NotErrorIs(t, err, lockstore.ErrUnavailable)

	lockstoretest.WaitTakeable(t, other, key) // unlocked on the server
	lockstoretest.WaitTakeable(t, s, key)     // and free on this node
	require.Equal(t, pid, connPIDs(s)[0], "the connection was kept")
	require.Zero(t, s.Stats().LocksLost)
}
