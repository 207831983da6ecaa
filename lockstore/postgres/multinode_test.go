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
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/claimbus/claimbus/internal/pgtest"
	"github.com/claimbus/claimbus/internal/testwait"
	"github.com/claimbus/claimbus/lockstore"
)

// twoNodes opens two stores on one database through two pools with
// different application_names: two nodes.
func twoNodes(t *testing.T, cfg Config) (dsn string, a, b *Store) {
	t.Helper()
	dsn = pgtest.DSN(t)
	pa := pgtest.Connect(t, dsn, pgtest.PoolConfig{MaxConns: 2, ApplicationName: "node-a"})
	pb := pgtest.Connect(t, dsn, pgtest.PoolConfig{MaxConns: 2, ApplicationName: "node-b"})
	return dsn, newTestStore(t, pa, cfg), newTestStore(t, pb, cfg)
}

// waitFor polls cond, on the test's goroutine (some conditions call
// require), every millisecond until it holds, failing t after 20 seconds.
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	testwait.Until(t, 20*time.Second, time.Millisecond, cond, "%s", what)
}

func TestTwoNodesMutualExclusionStorm(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	_, a, b := twoNodes(t, Config{PollInterval: 5 * time.Millisecond})
	const (
		keys      = 4
		perNode   = 16
		rounds    = 15
		namespace = "storm"
	)
	var (
		active    [keys]atomic.Int32
		lastToken [keys]atomic.Int64
		overlaps  atomic.Int32
		stale     atomic.Int32
		grants    [2]atomic.Int32
	)
	var wg sync.WaitGroup
	errs := make(chan error, 2*perNode)
	for n, s := range []*Store{a, b} {
		for g := range perNode {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for r := range rounds {
					k := (g + r) % keys
					var l lockstore.Lock
					var err error
					if r%3 == 0 {
						l, err = s.TryLock(ctx, lockstore.Key{Namespace: namespace, ID: fmt.Sprint(k)})
						if err != nil {
							if errorsIsLocked(err) {
								continue
							}
							errs <- err
							return
						}
					} else if l, err = s.Lock(ctx, lockstore.Key{Namespace: namespace, ID: fmt.Sprint(k)}); err != nil {
						errs <- err
						return
					}
					if active[k].Add(1) != 1 {
						overlaps.Add(1)
					}
					if prev := lastToken[k].Swap(l.Token()); l.Token() <= prev {
						stale.Add(1)
					}
					grants[n].Add(1)
					time.Sleep(100 * time.Microsecond) //nolint:forbidigo // hold it across a scheduling point: the sleep is the condition
					active[k].Add(-1)
					if err := l.Release(ctx); err != nil {
						errs <- err
						return
					}
				}
			}()
		}
	}
	requireNoErrors(t, &wg, errs)
	require.Zero(t, overlaps.Load(), "two owners of one key at once, across nodes")
	require.Zero(t, stale.Load(), "a token not greater than the key's previous one")
	require.Positive(t, grants[0].Load(), "node a was granted keys")
	require.Positive(t, grants[1].Load(), "node b was granted keys")
	t.Logf("grants: node a %d, node b %d", grants[0].Load(), grants[1].Load())
	for k := range keys {
		l, err := a.TryLock(ctx, lockstore.Key{Namespace: namespace, ID: fmt.Sprint(k)})
		require.NoError(t, err, "key %d is free after the storm", k)
		require.NoError(t, l.Release(ctx))
	}
}

func errorsIsLocked(err error) bool { return errors.Is(err, lockstore.ErrLocked) }

func TestTwoNodesFIFOWithinEachNode(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	_, a, b := twoNodes(t, Config{PollInterval: 2 * time.Millisecond})
	key := lockstore.Key{Namespace: "fifo", ID: "hot"}
	holder, err := a.TryLock(ctx, key)
	require.NoError(t, err)

	const waiters = 6
	type grant struct {
		node, index int
		token       int64
	}
	grants := make(chan grant, 2*waiters)
	errs := make(chan error, 2*waiters)
	var wg sync.WaitGroup
	for i := range waiters {
		for n, s := range []*Store{a, b} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				l, err := s.Lock(ctx, key)
				if err != nil {
					errs <- err
					return
				}
				grants <- grant{n, i, l.Token()}
				errs <- l.Release(context.Background())
			}()
			// On node a the waiters queue behind the holder. On node b the
			// first one holds the turn and polls the server, the others
			// queue behind it.
			waitFor(t, "waiter queued", func() bool {
				if n == 0 {
					return s.Waiting(key) == i+1
				}
				return turnTaken(s, key) && s.Waiting(key) == i
			})
		}
	}
	// Node b's head polls while a holds the key: it is not granted.
	select {
	case g := <-grants:
		t.Fatalf("granted %+v while node a held the key", g)
	default:
	}
	require.NoError(t, holder.Release(ctx))
	requireNoErrors(t, &wg, errs)
	close(grants)
	next := [2]int{}
	last := holder.Token()
	for g := range grants {
		require.Equal(t, next[g.node], g.index, "node %d grants in queue order", g.node)
		next[g.node]++
		require.Greater(t, g.token, last, "tokens grow in grant order across nodes")
		last = g.token
	}
	require.Equal(t, [2]int{waiters, waiters}, next)
}

func TestWaitOnOtherNodeDoesNotStallOtherKeys(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	_, a, b := twoNodes(t, Config{LockConns: 1, PollInterval: 20 * time.Millisecond})
	hot := lockstore.Key{Namespace: "stall", ID: "hot"}
	held, err := b.TryLock(ctx, hot)
	require.NoError(t, err)

	// Node a waits for hot, on its only lock connection.
	waiting := make(chan error, 1)
	go func() {
		l, err := a.Lock(ctx, hot)
		if err == nil {
			err = l.Release(ctx)
		}
		waiting <- err
	}()
	// Meanwhile node a takes and releases 200 other keys on that same
	// connection, and Lock on a free key is granted at once.
	for i := range 200 {
		k := lockstore.Key{Namespace: "stall", ID: fmt.Sprint("other-", i)}
		var l lockstore.Lock
		if i%2 == 0 {
			l, err = a.TryLock(ctx, k)
		} else {
			l, err = a.Lock(ctx, k)
		}
		require.NoError(t, err)
		require.NoError(t, l.Release(ctx))
	}
	select {
	case err := <-waiting:
		t.Fatalf("the waiter on a key node b holds returned early: %v", err)
	default:
	}
	require.NoError(t, held.Release(ctx))
	require.NoError(t, <-waiting)
}

func TestHeldAcrossNodes(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	cfg := Config{Namespaces: map[string]int32{"lobby": 1}}
	_, a, b := twoNodes(t, cfg)
	mine, err := a.TryLock(ctx, lockstore.Key{Namespace: "lobby", ID: "7"})
	require.NoError(t, err)
	theirs, err := b.TryLock(ctx, lockstore.Key{Namespace: "lobby", ID: "8"})
	require.NoError(t, err)
	hashed, err := b.TryLock(ctx, lockstore.Key{Namespace: "staff.email", ID: "ann@x.org"})
	require.NoError(t, err)

	hs, err := a.Held(ctx)
	require.NoError(t, err)
	require.ElementsMatch(t, []lockstore.Holder{
		{Key: mine.Key(), Token: mine.Token(), AcquiredAt: mine.AcquiredAt(), Node: "node-a"},
		{Key: lockstore.Key{Namespace: "lobby", ID: fmt.Sprint(hashID("8"))}, Node: "node-b"},
		// Golden: "staff.email" → 681361299, "ann@x.org" → 1406021056.
		{Key: lockstore.Key{Namespace: "681361299", ID: "1406021056"}, Node: "node-b"},
	}, hs)

	for _, l := range []lockstore.Lock{mine, theirs, hashed} {
		require.NoError(t, l.Release(ctx))
	}
	hs, err = b.Held(ctx)
	require.NoError(t, err)
	require.Empty(t, hs)
}

// lockBackends returns the pids of the backends holding advisory locks in
// the database, with how many each holds, read on an admin connection.
func lockBackends(ctx context.Context, t *testing.T, admin *pgx.Conn) map[uint32]int {
	t.Helper()
	rows, err := admin.Query(ctx, `
		SELECT pid, count(*) FROM pg_locks
		WHERE locktype = 'advisory' AND granted AND database = (SELECT oid FROM pg_database WHERE datname = current_database())
		GROUP BY pid`)
	require.NoError(t, err)
	defer rows.Close()
	out := map[uint32]int{}
	for rows.Next() {
		var pid uint32
		var n int
		require.NoError(t, rows.Scan(&pid, &n))
		out[pid] = n
	}
	require.NoError(t, rows.Err())
	return out
}

func TestThousandLocksOnConfiguredConnections(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	dsn := pgtest.DSN(t)
	pool := pgtest.Connect(t, dsn, pgtest.PoolConfig{MaxConns: 4, ApplicationName: "node-k"})
	admin := serialAdmin(t, dsn)
	s := newTestStore(t, pool, Config{LockConns: 3})

	const n = 1000
	locks := make([]lockstore.Lock, n)
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			l, err := s.Lock(ctx, lockstore.Key{Namespace: "thousand", ID: fmt.Sprint(i)})
			locks[i] = l
			errs <- err
		}()
	}
	requireNoErrors(t, &wg, errs)

	backends := lockBackends(ctx, t, admin)
	require.Len(t, backends, 3, "the locks live on the 3 lock connections")
	total := 0
	for pid, count := range backends {
		total += count
		require.Positive(t, count, "pid %d", pid)
	}
	require.Equal(t, n, total)
	var appConns int
	require.NoError(t, admin.QueryRow(ctx,
		`SELECT count(*) FROM pg_stat_activity WHERE application_name = 'node-k' AND datname = current_database()`).Scan(&appConns))
	require.Equal(t, 3+int(pool.Stat().TotalConns()), appConns,
		"the node's server connections are its pool's and its 3 lock connections")

	hs, err := s.Held(ctx)
	require.NoError(t, err)
	require.Len(t, hs, n)
	for _, h := range hs {
		require.Equal(t, "node-k", h.Node)
		require.Positive(t, h.Token)
	}

	// The releases report on errs, asserted on this goroutine: require
	// must not call t.FailNow from another.
	errs = make(chan error, n)
	for _, l := range locks {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- l.Release(ctx)
		}()
	}
	requireNoErrors(t, &wg, errs, "Release")
	require.Empty(t, lockBackends(ctx, t, admin))
}

func TestLockConnectionsCarryThePoolsSettings(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	dsn := pgtest.DSN(t)
	pc, err := pgxpool.ParseConfig(dsn)
	require.NoError(t, err)
	pc.ConnConfig.RuntimeParams["application_name"] = "node-s"
	pc.ConnConfig.RuntimeParams["search_path"] = "custom_path"
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	admin := serialAdmin(t, dsn)
	s := newTestStore(t, pool, Config{Schema: "locks"})
	require.Equal(t, "node-s", s.cfg.Node)

	l, err := s.TryLock(ctx, lockstore.Key{Namespace: "ns", ID: "1"})
	require.NoError(t, err)
	var app, user string
	pid := l.(*pgLock).c.pid
	require.NoError(t, admin.QueryRow(ctx, `SELECT application_name, usename FROM pg_stat_activity WHERE pid = $1`, pid).Scan(&app, &user))
	require.Equal(t, "node-s", app)
	require.Equal(t, pc.ConnConfig.User, user)
	// The lock connections are opened with the pool's settings (the
	// server does not show another session's settings).
	require.Equal(t, "custom_path", s.connConfig.RuntimeParams["search_path"])
	// The token sequence is in the configured schema.
	var seq bool
	require.NoError(t, admin.QueryRow(ctx, `SELECT to_regclass('locks.lock_token') IS NOT NULL`).Scan(&seq))
	require.True(t, seq)
	require.NoError(t, l.Release(ctx))
}

// turnTaken reports whether a claimant holds key's turn in s's node-local
// queue.
func turnTaken(s *Store, key lockstore.Key) bool {
	id, err := s.lockID(key)
	if err != nil {
		return false
	}
	return s.queue.queued(id) > 0
}
