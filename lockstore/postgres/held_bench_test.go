package postgres

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/claimbus/claimbus/internal/pgtest"
	"github.com/claimbus/claimbus/lockstore"
)

// hold takes n distinct locks on s from 32 goroutines, in namespace ns,
// and returns them; the store's Close ends them.
func hold(tb testing.TB, s *Store, ns string, n int) []lockstore.Lock {
	tb.Helper()
	const workers = 32
	locks := make([]lockstore.Lock, n)
	var wg sync.WaitGroup
	ctx := context.Background()
	for w := range workers {
		wg.Go(func() {
			for i := w; i < n; i += workers {
				l, err := s.TryLock(ctx, lockstore.Key{Namespace: ns, ID: fmt.Sprint(i)})
				if err != nil {
					tb.Error(err)
					return
				}
				locks[i] = l
			}
		})
	}
	wg.Wait()
	if tb.Failed() {
		tb.FailNow()
	}
	return locks
}

// BenchmarkTryLockReleaseHeld is BenchmarkTryLockRelease (64 goroutines,
// distinct keys) while the node holds 0, 1,000 or 10,000 other locks: the
// store as configured by default, and with every lock on the 2 base
// connections (LocksPerConn out of reach, as before connections grew),
// where PostgreSQL's walk of the session's lock table at every statement
// makes each round trip slower.
func BenchmarkTryLockReleaseHeld(b *testing.B) {
	dsn := pgtest.DSN(b)
	for _, mode := range []struct {
		name string
		cfg  Config
	}{
		{"mode=store", Config{}},
		{"mode=fixed2conns", Config{LocksPerConn: 1 << 30}},
	} {
		for _, n := range []int{0, 1_000, 10_000} {
			b.Run(fmt.Sprintf("%s/held=%d", mode.name, n), func(b *testing.B) {
				pool := pgtest.Connect(b, dsn, pgtest.PoolConfig{MaxConns: 2, ApplicationName: "bench-held"})
				cfg := mode.cfg
				cfg.MaxHeld = n + 1_000
				s := newTestStore(b, pool, cfg)
				hold(b, s, "held", n)
				runParallel(b, func(ctx context.Context, key lockstore.Key, _ LockID) error {
					l, err := s.TryLock(ctx, key)
					if err != nil {
						return err
					}
					return l.Release(ctx)
				})
				b.StopTimer()
				b.ReportMetric(float64(len(s.lockConns())), "lockconns")
			})
		}
	}
}

// BenchmarkHold100k takes 100,000 locks on one node (32 goroutines), on a
// private cluster whose max_locks_per_transaction is raised to 2048 as
// docs/postgres-production.md describes, and reports how long it took
// (s/100k) and the lock connections it took. One op is the whole run.
func BenchmarkHold100k(b *testing.B) {
	ctx := context.Background()
	cluster := pgtest.NewCluster(b)
	admin := serialAdmin(b, cluster.DSN())
	if _, err := admin.Exec(ctx, "ALTER SYSTEM SET max_locks_per_transaction = 2048"); err != nil {
		b.Fatal(err)
	}
	if err := cluster.Restart(ctx); err != nil {
		b.Fatal(err)
	}
	for i := range b.N {
		func() {
			pool := pgtest.Connect(b, cluster.DSN(), pgtest.PoolConfig{MaxConns: 2, ApplicationName: "bench-100k"})
			s, err := New(ctx, pool, Config{MaxHeld: 110_000})
			if err != nil {
				b.Fatal(err)
			}
			defer func() { _ = s.Close() }()
			start := time.Now()
			hold(b, s, fmt.Sprint("h", i), 100_000)
			b.ReportMetric(time.Since(start).Seconds(), "s/100k")
			b.ReportMetric(float64(len(s.lockConns())), "lockconns")
		}()
	}
}
