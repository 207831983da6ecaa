package postgres

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/claimbus/claimbus/internal/faultproxy"
	"github.com/claimbus/claimbus/internal/pgtest"
	"github.com/claimbus/claimbus/lockstore"
)

// The fault suite: three Stores on one database, the first behind a TCP
// proxy that injects the fault, 15 goroutines on 4 keys making fenced
// writes to a table reached straight (not through the proxy), as an
// application's resource would be. Each case checks the contract of
// docs/lockstore.md#losing-a-lock-the-contract: tokens rise per key in
// grant order, the resource never takes a stale holder's write once the
// next holder wrote, and the window (from a grant to the moment the
// previous holder stopped believing it held the key: Lost or Release)
// stays within LeaseBound.

// stormLease is the suite's lease: short, so that the suite stays fast.
var stormLease = Config{LeaseBound: time.Second, KeepAlive: 250 * time.Millisecond, Timeout: 500 * time.Millisecond,
	PollInterval: 10 * time.Millisecond, ReconnectBackoff: 50 * time.Millisecond}

// windowSlack is what the scheduler may add to the window on a loaded
// 2-core machine under -race: the time between the lease deadline and the
// holder's goroutine seeing Lost.
const windowSlack = 250 * time.Millisecond

// proxiedDSN is dsn with its host and port replaced by the proxy's.
func proxiedDSN(t testing.TB, dsn string, p *faultproxy.Proxy) string {
	t.Helper()
	u, err := url.Parse(dsn)
	require.NoError(t, err)
	u.Host = p.Addr()
	return u.String()
}

// newProxy starts a proxy in front of dsn's server.
func newProxy(t testing.TB, dsn string) *faultproxy.Proxy {
	t.Helper()
	u, err := url.Parse(dsn)
	require.NoError(t, err)
	p, err := faultproxy.New(u.Host)
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.Close() })
	return p
}

// hold is one grant in the storm, as its holder saw it.
type stormHold struct {
	node    int
	key     string
	token   int64
	granted time.Time
	// ended is when the holder stopped believing it held the key: Lost, or
	// the call of Release, whichever came first; releaseErr is Release's
	// answer.
	ended      time.Time
	lost       bool
	releaseErr error
}

type stormRecord struct {
	mu    sync.Mutex
	holds []*stormHold
	// refused counts the fenced writes the resource refused (a higher
	// token had written).
	refused int
}

func (r *stormRecord) add(h *stormHold) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.holds = append(r.holds, h)
}

// fenceSchema is the resource: one row per key with the highest token that
// wrote it, and the history of every write it took.
const fenceSchema = `
CREATE TABLE fence (key text PRIMARY KEY, token bigint NOT NULL, node int NOT NULL);
CREATE TABLE fence_history (seq bigserial PRIMARY KEY, key text NOT NULL, token bigint NOT NULL, node int NOT NULL);`

// fencedWriteSQL writes for token, unless a higher token wrote the key: the
// write a resource that fences stale holders makes.
const fencedWriteSQL = `
WITH w AS (
	INSERT INTO fence AS f (key, token, node) VALUES ($1, $2, $3)
	ON CONFLICT (key) DO UPDATE SET token = excluded.token, node = excluded.node WHERE f.token <= excluded.token
	RETURNING key, token, node)
INSERT INTO fence_history (key, token, node) SELECT key, token, node FROM w`

// storm runs the storm until stop is closed, then returns what the holders
// saw.
func storm(t *testing.T, stores []*Store, resource *pgxpool.Pool, stop <-chan struct{}) *stormRecord {
	t.Helper()
	const goroutines, keys = 15, 4
	rec := &stormRecord{}
	var wg sync.WaitGroup
	for g := range goroutines {
		node := g % len(stores)
		s := stores[node]
		key := fmt.Sprint("k", g%keys)
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				if !stormRound(t, s, node, key, resource, rec, stop) {
					return
				}
			}
		})
	}
	wg.Wait()
	return rec
}

// stormRound takes key once (a lock error other than a fault's is a test
// failure), writes under it until Lost, for twice the lease bound on node
// 0 (the one the faults hit: a long job, the case where a lost lock
// matters) and 20ms on the others, and releases it.
func stormRound(t *testing.T, s *Store, node int, key string, resource *pgxpool.Pool, rec *stormRecord, stop <-chan struct{}) bool {
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	l, err := s.Lock(ctx, lockstore.Key{Namespace: "storm", ID: key})
	cancel()
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return true
	case errors.Is(err, lockstore.ErrUnavailable):
		// The lock connection is being replaced: wait for it.
		select {
		case <-stop:
			return false
		case <-time.After(20 * time.Millisecond):
			return true
		}
	case err != nil:
		t.Errorf("node %d: lock %s: %v", node, key, err)
		return false
	}
	h := &stormHold{node: node, key: key, token: l.Token(), granted: time.Now()}
	lostAt := make(chan time.Time, 1)
	released := make(chan struct{})
	go func() {
		select {
		case <-l.Lost():
			lostAt <- time.Now()
		case <-released:
		}
		close(lostAt)
	}()
	holdFor := 20 * time.Millisecond
	if node == 0 {
		holdFor = 2 * s.cfg.LeaseBound
	}
	deadline := time.After(holdFor)
writes:
	for {
		select {
		case <-l.Lost():
			break writes
		case <-deadline:
			break writes
		default:
		}
		wctx, wcancel := context.WithTimeout(context.Background(), 2*time.Second)
		tag, err := resource.Exec(wctx, fencedWriteSQL, key, h.token, node)
		wcancel()
		if err != nil {
			t.Errorf("fenced write: %v", err)
			break
		}
		if tag.RowsAffected() == 0 {
			rec.mu.Lock()
			rec.refused++
			rec.mu.Unlock()
		}
	}
	// The holder stops believing it holds the key when it calls Release
	// (the next holder may be granted before Release returns).
	h.ended = time.Now()
	h.releaseErr = l.Release(context.Background())
	close(released)
	if at, ok := <-lostAt; ok && at.Before(h.ended) {
		h.lost = true
		h.ended = at
	}
	rec.add(h)
	return true
}

// checkStorm checks the contract on a storm's record and returns the
// longest window it saw.
func checkStorm(ctx context.Context, t *testing.T, rec *stormRecord, resource *pgxpool.Pool, lease time.Duration) (window time.Duration, refused int) {
	t.Helper()
	byKey := map[string][]*stormHold{}
	for _, h := range rec.holds {
		byKey[h.key] = append(byKey[h.key], h)
	}
	overlaps := 0
	for key, holds := range byKey {
		slices.SortFunc(holds, func(a, b *stormHold) int { return a.granted.Compare(b.granted) })
		for i, h := range holds {
			if i > 0 {
				require.Greater(t, h.token, holds[i-1].token, "key %s: token went back at grant %d", key, i)
			}
			// Every earlier holder that still believed it held the key.
			for _, old := range holds[:i] {
				if old.ended.After(h.granted) {
					overlaps++
					window = max(window, old.ended.Sub(h.granted))
					require.True(t, old.lost || errors.Is(old.releaseErr, lockstore.ErrLockLost),
						"key %s: node %d's token %d overlapped node %d's token %d, and its Release said nil",
						key, old.node, old.token, h.node, h.token)
				}
			}
			if !h.lost && h.releaseErr != nil {
				require.ErrorIs(t, h.releaseErr, lockstore.ErrLockLost)
			}
		}
	}
	require.LessOrEqual(t, window, lease+windowSlack, "the window passed the lease bound")

	// The resource took writes in non-decreasing token order per key: once
	// a holder wrote, no lower token got in.
	rows, err := resource.Query(ctx, `SELECT key, token FROM fence_history ORDER BY seq`)
	require.NoError(t, err)
	last := map[string]int64{}
	n := 0
	for rows.Next() {
		var key string
		var token int64
		require.NoError(t, rows.Scan(&key, &token))
		require.GreaterOrEqual(t, token, last[key], "key %s: a stale holder's write got in", key)
		last[key] = token
		n++
	}
	require.NoError(t, rows.Err())
	t.Logf("%d holds, %d fenced writes taken, %d refused, %d overlaps, longest window %v", len(rec.holds), n, rec.refused, overlaps, window)
	return window, rec.refused
}

// stormFixture is three stores, the first one's lock connections through
// a proxy, and the resource's pool.
type stormFixture struct {
	dsn      string
	proxy    *faultproxy.Proxy
	stores   []*Store
	resource *pgxpool.Pool
	node0    string // application_name of store 0's lock connections
}

func newStormFixture(t *testing.T, cfg Config) *stormFixture {
	t.Helper()
	ctx := testCtx(t)
	f := &stormFixture{dsn: pgtest.DSN(t)}
	f.proxy = newProxy(t, f.dsn)
	f.resource = pgtest.Connect(t, f.dsn, pgtest.PoolConfig{MaxConns: 8, ApplicationName: "resource"})
	_, err := f.resource.Exec(ctx, fenceSchema)
	require.NoError(t, err)
	f.node0 = fmt.Sprint("storm-a-", time.Now().UnixNano())
	for i, name := range []string{f.node0, "storm-b", "storm-c"} {
		dsn := f.dsn
		if i == 0 {
			dsn = proxiedDSN(t, f.dsn, f.proxy)
		}
		c := cfg
		c.Node = name
		f.stores = append(f.stores, newTestStore(t, pgtest.Connect(t, dsn, pgtest.PoolConfig{MaxConns: 2, ApplicationName: name}), c))
	}
	return f
}

// stormResult is what a storm under a fault measured.
type stormResult struct {
	window  time.Duration // the longest overlap
	refused int           // stale writes the resource refused
	// recovery is from the end of the fault (the heal, or the injection of
	// a fault that needs none) to node 0's lock connections all being up
	// again (new ones: its sessions of before the fault are gone).
	recovery time.Duration
}

// run runs the storm for before, injects the fault, runs for during, heals
// with heal (which may be nil), runs for after, and checks the record.
func (f *stormFixture) run(t *testing.T, before, during, after time.Duration, inject, heal func()) stormResult {
	t.Helper()
	stop := make(chan struct{})
	done := make(chan *stormRecord)
	go func() { done <- storm(t, f.stores, f.resource, stop) }()
	time.Sleep(before) //nolint:forbidigo // the storm runs unharmed for a while: the sleep is the condition
	before0 := connPIDs(f.stores[0])
	// back waits, from the end of the fault, until node 0's lock
	// connections are all new ones, and sends how long that took, or -1
	// after 20s; it runs beside the fault's sleep, so it asserts nothing
	// (the test's goroutine checks what it sends).
	back := func(end time.Time) <-chan time.Duration {
		ch := make(chan time.Duration, 1)
		renewed := func() bool {
			for _, pid := range connPIDs(f.stores[0]) {
				if pid == 0 || slices.Contains(before0, pid) {
					return false
				}
			}
			return true
		}
		go func() {
			tick := time.NewTicker(time.Millisecond)
			defer tick.Stop()
			timeout := time.After(20 * time.Second)
			for !renewed() {
				select {
				case <-tick.C:
				case <-timeout:
					ch <- -1
					return
				}
			}
			ch <- time.Since(end)
		}()
		return ch
	}
	inject()
	var recovery <-chan time.Duration
	if heal == nil {
		recovery = back(time.Now())
	}
	time.Sleep(during) //nolint:forbidigo // the fault lasts this long: the sleep is the condition
	if heal != nil {
		heal()
		recovery = back(time.Now())
	}
	var r stormResult
	r.recovery = <-recovery
	require.GreaterOrEqual(t, r.recovery, time.Duration(0), "node 0's lock connections were not all new within 20s of the fault's end")
	time.Sleep(after) //nolint:forbidigo // the storm runs on after recovery: the sleep is the condition
	close(stop)
	rec := <-done
	r.window, r.refused = checkStorm(testCtx(t), t, rec, f.resource, f.stores[0].cfg.LeaseBound)
	t.Logf("window %v, %d stale writes refused, node 0 back %v after the fault ended", r.window, r.refused, r.recovery)
	return r
}

// TestFaultStormServerToClientSilentThenSessionEnded: the storm must show
// the window it is about (node a writing while another node holds its
// key) and the fencing that refuses node a's stale writes. Whether node a
// holds a key at the moment of the fault is the storm's luck (about 1 run
// in 6 under load it did not), so the fault is retried, on a new fixture,
// until the storm shows both, at most stormAttempts times; every attempt
// checks the storm's invariants in full.
func TestFaultStormServerToClientSilentThenSessionEnded(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	const stormAttempts = 5
	for attempt := 1; ; attempt++ {
		f := newStormFixture(t, stormLease)
		r := f.run(t, 300*time.Millisecond, 2*time.Second, time.Second, func() {
			// Node a stops hearing the server, then the server ends node a's
			// sessions (an administrator, a server-side timeout): the others
			// get its keys at once, node a learns only from its lease.
			f.proxy.SilenceServerToClient()
			_, err := pgtest.TerminateBackends(ctx, f.dsn, f.node0)
			require.NoError(t, err)
		}, f.proxy.Heal)
		if r.window > 0 && r.refused > 0 {
			return
		}
		require.Less(t, attempt, stormAttempts,
			"in %d attempts the fault made no overlap with a stale write refused (last: window %v, %d refused): the test cannot see the window", attempt, r.window, r.refused)
		t.Logf("attempt %d: node a held no key when the fault hit (window %v, %d refused); again", attempt, r.window, r.refused)
	}
}

func TestFaultStormBlackHole(t *testing.T) {
	t.Parallel()
	f := newStormFixture(t, stormLease)
	f.run(t, 300*time.Millisecond, 2*time.Second, time.Second, f.proxy.BlackHole, f.proxy.Heal)
}

func TestFaultStormLatencySpike(t *testing.T) {
	t.Parallel()
	f := newStormFixture(t, stormLease)
	// Past Timeout: node a's round trips fail and its locks are given up.
	f.run(t, 300*time.Millisecond, 1500*time.Millisecond, time.Second, func() { f.proxy.Latency(700 * time.Millisecond) }, f.proxy.Heal)
}

func TestFaultStormCut(t *testing.T) {
	t.Parallel()
	f := newStormFixture(t, stormLease)
	f.run(t, 300*time.Millisecond, 500*time.Millisecond, 500*time.Millisecond, func() { f.proxy.Cut() }, nil)
}

func TestFaultStormTerminated(t *testing.T) {
	t.Parallel()
	f := newStormFixture(t, stormLease)
	ctx := testCtx(t)
	f.run(t, 300*time.Millisecond, 500*time.Millisecond, 500*time.Millisecond, func() {
		_, err := pgtest.TerminateBackends(ctx, f.dsn, f.node0)
		require.NoError(t, err)
	}, nil)
}

// TestKeysFreeAfterBlackHoleHeals: a node whose network went black holds
// its keys on the server until its close gets through; once the network
// heals, they are free within 1s (KeepAlive and Timeout of 1s, the
// default lease bound).
func TestKeysFreeAfterBlackHoleHeals(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	dsn := pgtest.DSN(t)
	p := newProxy(t, dsn)
	cfg := Config{KeepAlive: time.Second, Timeout: time.Second, ReconnectBackoff: 50 * time.Millisecond, PollInterval: 10 * time.Millisecond}
	a := newTestStore(t, pgtest.Connect(t, proxiedDSN(t, dsn, p), pgtest.PoolConfig{MaxConns: 1, ApplicationName: "hole-a"}), cfg)
	b := newTestStore(t, pgtest.Connect(t, dsn, pgtest.PoolConfig{MaxConns: 1, ApplicationName: "hole-b"}), cfg)
	var locks []lockstore.Lock
	for i := range 10 {
		l, err := a.TryLock(ctx, lockstore.Key{Namespace: "hole", ID: fmt.Sprint(i)})
		require.NoError(t, err)
		locks = append(locks, l)
	}

	p.BlackHole()
	start := time.Now()
	for _, l := range locks {
		requireClosedWithin(t, l.Lost(), cfg.withDefaults("").LeaseBound+windowSlack, "Lost in a black hole")
	}
	t.Logf("node a gave its locks up %v into the black hole", time.Since(start))
	// The server still holds them: nobody else gets in.
	_, err := b.TryLock(ctx, locks[0].Key())
	require.ErrorIs(t, err, lockstore.ErrLocked)

	time.Sleep(time.Until(start.Add(3 * time.Second))) //nolint:forbidigo // a 3s black hole: the sleep is the condition
	p.Heal()
	healed := time.Now()
	for _, l := range locks {
		lctx, cancel := context.WithDeadline(ctx, healed.Add(time.Second))
		got, err := b.Lock(lctx, l.Key())
		cancel()
		require.NoError(t, err, "%s not free within 1s of the heal", l.Key())
		require.Greater(t, got.Token(), l.Token())
		require.NoError(t, got.Release(ctx))
	}
	t.Logf("keys free %v after the heal", time.Since(healed))
	for _, l := range locks {
		require.ErrorIs(t, l.Release(ctx), lockstore.ErrLockLost)
	}
}

// TestReleaseInSilenceIsLost: a Release whose unlock cannot be confirmed
// within the lease bound returns ErrLockLost, never nil.
func TestReleaseInSilenceIsLost(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	dsn := pgtest.DSN(t)
	p := newProxy(t, dsn)
	s := newTestStore(t, pgtest.Connect(t, proxiedDSN(t, dsn, p), pgtest.PoolConfig{MaxConns: 1}), stormLease)
	l, err := s.TryLock(ctx, lockstore.Key{Namespace: "silent", ID: "1"})
	require.NoError(t, err)
	p.SilenceServerToClient()
	start := time.Now()
	err = l.Release(ctx)
	require.ErrorIs(t, err, lockstore.ErrLockLost)
	require.Less(t, time.Since(start), stormLease.LeaseBound+windowSlack)
	t.Logf("Release in silence: %v after %v", err, time.Since(start))
}

// TestSerializeWithoutDeadlineIsBoundedInSilence: a Serialize whose ctx has
// no deadline, on a pooled connection that goes silent, returns within
// StatementTimeout and a second, not never.
func TestSerializeWithoutDeadlineIsBoundedInSilence(t *testing.T) {
	t.Parallel()
	dsn := pgtest.DSN(t)
	p := newProxy(t, dsn)
	pool := pgtest.Connect(t, proxiedDSN(t, dsn, p), pgtest.PoolConfig{MaxConns: 2, ApplicationName: "silent-serial"})
	cfg := stormLease
	cfg.StatementTimeout = 300 * time.Millisecond
	s := newTestStore(t, pool, cfg)
	key := lockstore.Key{Namespace: "silent", ID: "serial"}
	_, err := runSerialize(context.Background(), s, key, func(context.Context, pgx.Tx) (int, error) { return 0, nil })
	require.NoError(t, err, "before the fault")

	p.BlackHole()
	start := time.Now()
	_, err = runSerialize(context.Background(), s, key, func(context.Context, pgx.Tx) (int, error) { return 0, nil })
	took := time.Since(start)
	require.Error(t, err)
	require.Less(t, took, cfg.StatementTimeout+statementBoundMargin+windowSlack+time.Second)
	t.Logf("Serialize without a deadline in a black hole: %v after %v", err, took)
	p.Heal()
}
