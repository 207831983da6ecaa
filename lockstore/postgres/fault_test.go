package postgres

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/claimbus/claimbus/internal/pgtest"
	"github.com/claimbus/claimbus/lockstore"
)

// requireClosedWithin waits for ch to close, failing t after d.
func requireClosedWithin(t *testing.T, ch <-chan struct{}, d time.Duration, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(d):
		t.Fatalf("%s: not closed within %s", what, d)
	}
}

// connPIDs returns the backend pids of s's lock connections (0 while down).
func connPIDs(s *Store) []uint32 {
	conns := s.lockConns()
	out := make([]uint32, len(conns))
	for i, c := range conns {
		c.mu.Lock()
		out[i] = c.pid
		c.mu.Unlock()
	}
	return out
}

// terminateBackend ends the server session of backend pid, as an
// administrator does, and requires that it existed. It passes no timeout:
// with one, pg_terminate_backend polls for the backend's exit every 100ms,
// which a test timing the loss would measure.
func terminateBackend(ctx context.Context, t *testing.T, admin *pgx.Conn, pid uint32) {
	t.Helper()
	var terminated bool
	require.NoError(t, admin.QueryRow(ctx, `SELECT pg_terminate_backend($1)`, pid).Scan(&terminated))
	require.True(t, terminated, "backend %d was there to terminate", pid)
}

func allUp(s *Store) bool {
	for _, pid := range connPIDs(s) {
		if pid == 0 {
			return false
		}
	}
	return true
}

func TestTerminatedLockConnection(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	dsn := pgtest.DSN(t)
	cfg := Config{KeepAlive: 100 * time.Millisecond, PollInterval: 10 * time.Millisecond}
	pa := pgtest.Connect(t, dsn, pgtest.PoolConfig{MaxConns: 2, ApplicationName: "node-a"})
	pb := pgtest.Connect(t, dsn, pgtest.PoolConfig{MaxConns: 2, ApplicationName: "node-b"})
	admin := serialAdmin(t, dsn)
	a := newTestStore(t, pa, cfg)
	b := newTestStore(t, pb, cfg)

	// Node a holds keys on both of its lock connections.
	var locks []lockstore.Lock
	for i := range 20 {
		l, err := a.TryLock(ctx, lockstore.Key{Namespace: "term", ID: fmt.Sprint(i)})
		require.NoError(t, err)
		locks = append(locks, l)
	}
	victim := locks[0].(*pgLock).c
	var onVictim, onOther []lockstore.Lock
	for _, l := range locks {
		if l.(*pgLock).c == victim {
			onVictim = append(onVictim, l)
		} else {
			onOther = append(onOther, l)
		}
	}
	require.NotEmpty(t, onOther, "20 keys spread over both connections")

	// Node b waits for a key node a holds on the victim connection.
	granted := make(chan lockstore.Lock, 1)
	go func() {
		l, err := b.Lock(ctx, onVictim[0].Key())
		if err != nil {
			t.Error(err)
		}
		granted <- l
	}()
	waitFor(t, "node b polling", func() bool { return lockBackendsHave(ctx, t, admin, victim) })

	oldPID := connPIDs(a)[victim.index]
	start := time.Now()
	terminateBackend(ctx, t, admin, oldPID)

	bl := <-granted
	require.NotNil(t, bl)
	freed := time.Since(start)
	for _, l := range onVictim {
		requireClosedWithin(t, l.Lost(), 5*time.Second, "Lost of a lock on the terminated connection")
	}
	noticed := time.Since(start)
	t.Logf("terminated a lock connection: node b acquired its key after %v; node a saw Lost after %v", freed, noticed)
	require.Greater(t, bl.Token(), onVictim[0].Token())

	// The locks on the other connection are untouched.
	for _, l := range onOther {
		requireOpen(t, l.Lost())
		_, err := b.TryLock(ctx, l.Key())
		require.ErrorIs(t, err, lockstore.ErrLocked)
	}
	require.EqualValues(t, len(onVictim), a.Stats().LocksLost, "Stats counts the locks of the broken connection")

	// A lost lock's Release says so, and is harmless.
	require.ErrorIs(t, onVictim[0].Release(ctx), lockstore.ErrLockLost)

	// The store reconnects; the lost lock's Release did not free node b's
	// grant, and node a takes its other lost keys again.
	waitFor(t, "reconnected", func() bool {
		pid := connPIDs(a)[victim.index]
		return pid != 0 && pid != oldPID
	})
	require.EqualValues(t, 1, a.Stats().Reconnects)
	_, err := a.TryLock(ctx, onVictim[0].Key())
	require.ErrorIs(t, err, lockstore.ErrLocked)
	for _, l := range onVictim[1:] {
		l2, err := a.TryLock(ctx, l.Key())
		require.NoError(t, err)
		require.Greater(t, l2.Token(), l.Token())
		require.NoError(t, l2.Release(ctx))
	}
	require.NoError(t, bl.Release(ctx))
	for _, l := range onOther {
		require.NoError(t, l.Release(ctx))
	}
}

func requireOpen(t *testing.T, ch <-chan struct{}) {
	t.Helper()
	select {
	case <-ch:
		t.Fatal("closed")
	default:
	}
}

// lockBackendsHave reports whether c's backend holds advisory locks.
func lockBackendsHave(ctx context.Context, t *testing.T, admin *pgx.Conn, c *lockConn) bool {
	c.mu.Lock()
	pid := c.pid
	c.mu.Unlock()
	return lockBackends(ctx, t, admin)[pid] > 0
}

func TestUnlockAnsweredFalseReplacesTheConnection(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	pool := pgtest.Pool(t, pgtest.PoolConfig{MaxConns: 2, ApplicationName: "node-f"})
	s := newTestStore(t, pool, Config{LockConns: 1})
	held, err := s.TryLock(ctx, lockstore.Key{Namespace: "false", ID: "held"})
	require.NoError(t, err)
	c := held.(*pgLock).c
	oldPID := connPIDs(s)[0]

	// A lock the session does not hold: the server answers the unlock with
	// false. The store must not guess what else the connection holds.
	phantom := &pgLock{c: c, key: lockstore.Key{Namespace: "false", ID: "phantom"}, id: LockID{Namespace: 5, ID: 5}, lost: make(chan struct{})}
	c.mu.Lock()
	phantom.gen = c.gen
	c.held[phantom.id] = phantom
	c.mu.Unlock()
	require.True(t, s.queue.tryTake(phantom.id))
	err = phantom.Release(ctx)
	require.ErrorIs(t, err, lockstore.ErrLockLost)

	requireClosedWithin(t, held.Lost(), 5*time.Second, "Lost of a lock on the connection in doubt")
	waitFor(t, "reconnected", func() bool { pid := connPIDs(s)[0]; return pid != 0 && pid != oldPID })
	// The old session is closed without waiting for the server, which may
	// end its backend after the new connection is up: the key is free once
	// it has (waitFor bounds the wait).
	waitFor(t, "the key freed with the closed session", func() bool {
		l, err := s.TryLock(ctx, held.Key())
		if errors.Is(err, lockstore.ErrLocked) {
			return false
		}
		require.NoError(t, err)
		require.NoError(t, l.Release(ctx))
		return true
	})
}

func TestCancelledCallersLateGrantIsUnlocked(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	dsn := pgtest.DSN(t)
	pool := pgtest.Connect(t, dsn, pgtest.PoolConfig{MaxConns: 2, ApplicationName: "node-c"})
	admin := serialAdmin(t, dsn)
	// A round trip is stalled on purpose: a lease long enough that the
	// stall never costs the connection, however loaded the machine.
	s := newTestStore(t, pool, Config{LockConns: 1, LeaseBound: time.Minute, Timeout: 30 * time.Second})
	pid := connPIDs(s)[0]
	key := lockstore.Key{Namespace: "late", ID: "1"}

	// Stall the lock connection's next round trip: nextval waits while
	// another transaction holds the sequence exclusively.
	// (ALTER SEQUENCE holds an ACCESS EXCLUSIVE lock on it until commit.)
	tx, err := admin.Begin(ctx)
	require.NoError(t, err)
	t.Cleanup(func() { _ = tx.Rollback(context.Background()) })
	_, err = tx.Exec(ctx, `ALTER SEQUENCE claimbus.lock_token NO CYCLE`)
	require.NoError(t, err)

	callCtx, cancel := context.WithCancel(ctx)
	result := make(chan error, 1)
	go func() {
		_, err := s.TryLock(callCtx, key)
		result <- err
	}()
	// Wait until the try-lock waits on the sequence lock (it holds the
	// advisory lock already), then give up on it.
	waitFor(t, "try-lock blocked on nextval", func() bool {
		var n int
		require.NoError(t, tx.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE pid = $1 AND wait_event_type = 'Lock'`, pid).Scan(&n))
		return n == 1
	})
	cancel()
	require.ErrorIs(t, <-result, context.Canceled)
	require.Equal(t, 0, s.Waiting(key))
	require.NoError(t, tx.Commit(ctx))

	// The grant arrives for nobody: the store unlocks it on the same
	// connection (the caller's cancellation did not close it), and passes
	// the key's turn on once the unlock is confirmed: a Lock gets it then.
	// (Not TryLock: the server may show the unlock a moment before the
	// store has read its answer.)
	waitFor(t, "late grant unlocked", func() bool { return len(lockBackends(ctx, t, admin)) == 0 })
	lctx, lcancel := context.WithTimeout(ctx, 10*time.Second)
	defer lcancel()
	l, err := s.Lock(lctx, key)
	require.NoError(t, err)
	require.Equal(t, pid, connPIDs(s)[0], "the shared connection survived the caller's cancellation")
	require.NoError(t, l.Release(ctx))
}

func TestServerRestart(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	cluster := pgtest.NewCluster(t)
	pool := pgtest.Connect(t, cluster.DSN(), pgtest.PoolConfig{MaxConns: 2, ApplicationName: "node-r"})
	s := newTestStore(t, pool, Config{KeepAlive: 100 * time.Millisecond, Timeout: time.Second, ReconnectBackoff: 100 * time.Millisecond})

	var locks []lockstore.Lock
	for i := range 10 {
		l, err := s.TryLock(ctx, lockstore.Key{Namespace: "restart", ID: fmt.Sprint(i)})
		require.NoError(t, err)
		locks = append(locks, l)
	}
	require.NoError(t, cluster.Stop(ctx))
	for _, l := range locks {
		requireClosedWithin(t, l.Lost(), 10*time.Second, "Lost when the server stops")
	}
	// While the server is down, calls fail fast with ErrUnavailable.
	waitFor(t, "lock connections down", func() bool {
		for _, pid := range connPIDs(s) {
			if pid != 0 {
				return false
			}
		}
		return true
	})
	for i := range 10 {
		_, err := s.TryLock(ctx, lockstore.Key{Namespace: "restart", ID: fmt.Sprint("down-", i)})
		require.ErrorIs(t, err, lockstore.ErrUnavailable)
		_, err = s.Lock(ctx, lockstore.Key{Namespace: "restart", ID: fmt.Sprint("down-", i)})
		require.ErrorIs(t, err, lockstore.ErrUnavailable)
	}
	for _, l := range locks {
		require.ErrorIs(t, l.Release(ctx), lockstore.ErrLockLost, "Release of a lost lock")
	}

	require.NoError(t, cluster.Start(ctx))
	waitFor(t, "lock connections back", func() bool { return allUp(s) })
	for i := range 10 {
		l, err := s.TryLock(ctx, lockstore.Key{Namespace: "restart", ID: fmt.Sprint(i)})
		require.NoError(t, err)
		require.Greater(t, l.Token(), locks[i].Token(), "the sequence survives the restart")
		require.NoError(t, l.Release(ctx))
	}
}

func TestBadInput(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	_, err := New(ctx, nil, Config{})
	require.ErrorContains(t, err, "nil pool")

	pool := pgtest.Pool(t, pgtest.PoolConfig{MaxConns: 2})
	_, err = New(ctx, pool, Config{Namespaces: map[string]int32{"lobby": 1, "group": 1, "big": 100}, LockConns: -1})
	require.ErrorContains(t, err, `["group" "lobby"] all have number 1`)
	require.ErrorContains(t, err, `"big" has number 100`)
	require.ErrorContains(t, err, "LockConns is -1")

	// A schema that cannot be created: the error says which.
	_, err = New(ctx, pool, Config{Schema: "pg_bad"})
	require.ErrorContains(t, err, `create schema "pg_bad"`)

	// A database that cannot be reached.
	pc := pool.Config()
	pc.ConnConfig.Port = 1
	dead, err := pgxpool.NewWithConfig(ctx, pc)
	require.NoError(t, err)
	defer dead.Close()
	_, err = New(ctx, dead, Config{})
	require.Error(t, err)

	s := newTestStore(t, pool, Config{})
	for _, key := range []lockstore.Key{{}, {Namespace: "ns"}, {ID: "1"}, {Namespace: "ns", ID: string(make([]byte, lockstore.MaxIDLen+1))}} {
		_, err := s.TryLock(ctx, key)
		require.ErrorIs(t, err, lockstore.ErrInvalidKey)
		_, err = s.Lock(ctx, key)
		require.ErrorIs(t, err, lockstore.ErrInvalidKey)
		require.Zero(t, s.Waiting(key))
	}
	require.NoError(t, s.Close())
	_, err = s.TryLock(ctx, lockstore.Key{Namespace: "ns", ID: "1"})
	require.ErrorIs(t, err, lockstore.ErrClosed)
	_, err = s.Held(ctx)
	require.ErrorIs(t, err, lockstore.ErrClosed)
}

func TestNewConcurrentlyCreatesTheSchemaOnce(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	dsn := pgtest.DSN(t)
	const nodes = 6
	errs := make(chan error, nodes)
	stores := make(chan *Store, nodes)
	for i := range nodes {
		pool := pgtest.Connect(t, dsn, pgtest.PoolConfig{MaxConns: 2, ApplicationName: fmt.Sprint("node-", i)})
		go func() {
			s, err := New(ctx, pool, Config{Schema: "concurrent"})
			errs <- err
			stores <- s
		}()
	}
	for range nodes {
		require.NoError(t, <-errs)
		s := <-stores
		t.Cleanup(func() { require.NoError(t, s.Close()) })
	}
	conn, err := pgx.Connect(ctx, dsn)
	require.NoError(t, err)
	defer conn.Close(ctx)
	var n int
	require.NoError(t, conn.QueryRow(ctx, `SELECT count(*) FROM pg_class WHERE relname = 'lock_token' AND relnamespace = 'concurrent'::regnamespace`).Scan(&n))
	require.Equal(t, 1, n)
}

// TestSilentServerIsNoticedByPing freezes the backend of a lock connection
// (SIGSTOP: the socket stays open and says nothing, as after a host or
// network loss) and checks that the store notices within KeepAlive +
// Timeout, ends the connection's locks, and recovers on a new backend.
func TestSilentServerIsNoticedByPing(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	_, s, l := newSilenceStore(ctx, t, "silent", 1)
	pid := int(connPIDs(s)[0])

	resume := stopBackend(t, pid)
	start := time.Now()
	requireClosedWithin(t, l.Lost(), 10*(silentKeepAlive+silentTimeout), "Lost of a lock on a silent connection")
	noticed := time.Since(start)
	t.Logf("a silent lock connection was noticed after %v (KeepAlive %v + Timeout %v)", noticed, silentKeepAlive, silentTimeout)
	require.GreaterOrEqual(t, noticed, silentTimeout, "noticed by the ping timing out, not by the socket closing")

	// Meanwhile the store has replaced the connection on a new backend.
	// Once the old backend runs again it finds its socket closed and exits,
	// which frees its lock.
	waitFor(t, "reconnected", func() bool { p := connPIDs(s)[0]; return p != 0 && int(p) != pid })
	resume()
	requireRetaken(ctx, t, s, l)
}

// TestOrphanedKeyFailsFastUntilItsConnectionIsBack: a lock connection gone
// silent (its backend stopped) is dropped while its old session still holds
// its locks. Until the connection is back, a claim of such a key fails fast
// with ErrUnavailable on it, not with ErrLocked on the other connection,
// which would say that a live owner holds the key; a key it did not hold
// goes to the other connection.
func TestOrphanedKeyFailsFastUntilItsConnectionIsBack(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	cluster, s, l := newSilenceStore(ctx, t, "orphan", 2)
	silent := l.(*pgLock).c
	pid := int(connPIDs(s)[silent.index])

	// No new session until the test allows it, so the silent connection
	// stays down.
	_, allow := refuseSessions(ctx, t, cluster.DSN(), "template1")
	resume := stopBackend(t, pid)
	requireClosedWithin(t, l.Lost(), 10*(silentKeepAlive+silentTimeout), "Lost of a lock on a silent connection")

	_, err := s.TryLock(ctx, l.Key())
	require.ErrorIs(t, err, lockstore.ErrUnavailable, "the old session may still hold it: fail fast")
	require.NotErrorIs(t, err, lockstore.ErrLocked)
	fresh, err := s.TryLock(ctx, keyOn(t, s, silent, "fresh"))
	require.NoError(t, err, "a key the silent connection did not hold goes to the other")
	require.NotSame(t, silent, fresh.(*pgLock).c)
	require.NoError(t, fresh.Release(ctx))

	// Once the old backend runs again it finds its socket closed and exits,
	// which frees its lock; the connection comes back.
	resume()
	allow()
	waitFor(t, "reconnected", func() bool { p := connPIDs(s)[silent.index]; return p != 0 && int(p) != pid })
	requireRetaken(ctx, t, s, l)
}

// requireRetaken requires that s takes l's key again within 10 seconds,
// with a greater token, once l's old session has ended.
func requireRetaken(ctx context.Context, t *testing.T, s *Store, l lockstore.Lock) {
	t.Helper()
	lockCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	l2, err := s.Lock(lockCtx, l.Key())
	require.NoError(t, err, "the old session's lock was freed")
	require.Greater(t, l2.Token(), l.Token())
	require.NoError(t, l2.Release(ctx))
}

// The KeepAlive and Timeout of newSilenceStore's store.
const silentKeepAlive, silentTimeout = 200 * time.Millisecond, 300 * time.Millisecond

// newSilenceStore opens a store of conns lock connections on a private
// cluster, whose backends the test may stop (stopBackend), noticing a
// silent one within silentKeepAlive + silentTimeout, and takes the key
// name/1 on it.
func newSilenceStore(ctx context.Context, t *testing.T, name string, conns int) (*pgtest.Cluster, *Store, lockstore.Lock) {
	t.Helper()
	cluster := pgtest.NewCluster(t)
	pool := pgtest.Connect(t, cluster.DSN(), pgtest.PoolConfig{MaxConns: 2, ApplicationName: "node-" + name})
	s := newTestStore(t, pool, Config{LockConns: conns, KeepAlive: silentKeepAlive, Timeout: silentTimeout, ReconnectBackoff: 50 * time.Millisecond})
	l, err := s.TryLock(ctx, lockstore.Key{Namespace: name, ID: "1"})
	require.NoError(t, err)
	return cluster, s, l
}

// stopBackend stops backend pid with SIGSTOP, and returns the function that
// resumes it (once; it also runs when t ends). pgtest.NewCluster runs the
// server on this machine, as this test's user or (for root) as postgres:
// the test may always signal it.
func stopBackend(t *testing.T, pid int) (resume func()) {
	t.Helper()
	require.NoError(t, syscall.Kill(pid, syscall.SIGSTOP),
		"SIGSTOP the backend process %d of the private cluster: the test must be able to signal the server's processes (run it as root, or as the user the cluster runs as)", pid)
	var once sync.Once
	resume = func() { once.Do(func() { _ = syscall.Kill(pid, syscall.SIGCONT) }) }
	t.Cleanup(resume)
	return resume
}

// refuseSessions makes the database of dsn refuse new sessions until allow
// (or the end of t) lets them in again. It returns the administrator's
// session that did it, on the database adminDB of the same server, since a
// session cannot close its own database.
func refuseSessions(ctx context.Context, t *testing.T, dsn, adminDB string) (admin *pgx.Conn, allow func()) {
	t.Helper()
	cfg, err := pgx.ParseConfig(dsn)
	require.NoError(t, err)
	db := pgx.Identifier{cfg.Database}.Sanitize()
	cfg.Database = adminDB
	admin, err = pgx.ConnectConfig(ctx, cfg)
	require.NoError(t, err)
	set := func(yes bool) {
		_, err := admin.Exec(ctx, fmt.Sprintf("ALTER DATABASE %s WITH ALLOW_CONNECTIONS %t", db, yes))
		require.NoError(t, err)
	}
	set(false)
	var once sync.Once
	allow = func() { once.Do(func() { set(true) }) }
	t.Cleanup(func() {
		allow()
		require.NoError(t, admin.Close(context.Background()))
	})
	return admin, allow
}
