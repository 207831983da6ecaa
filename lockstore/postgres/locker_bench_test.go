package postgres

import (
	"context"
	"fmt"
	"runtime"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/claimbus/claimbus/internal/pgtest"
	"github.com/claimbus/claimbus/lockstore"
)

// benchGoroutines is the number of goroutines of the TryLock+Release
// benchmarks (issue 3: 64).
const benchGoroutines = 64

// runParallel runs op in benchGoroutines goroutines, each with its own
// sequence of distinct keys.
func runParallel(b *testing.B, op func(ctx context.Context, key lockstore.Key, id LockID) error) {
	b.Helper()
	var worker atomic.Int64
	b.SetParallelism((benchGoroutines + 1) / max(1, runtimeProcs()))
	ctx := context.Background()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		w := worker.Add(1)
		i := 0
		for pb.Next() {
			i++
			key := lockstore.Key{Namespace: "bench", ID: fmt.Sprintf("%d/%d", w, i)}
			if err := op(ctx, key, computeLockID(nil, key)); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

// BenchmarkTryLockRelease compares, in one run, the store's TryLock and
// Release on distinct keys (64 goroutines, the default 2 lock connections)
// with the baseline of issue 3: each call takes a connection from a pool of
// 8 and runs pg_advisory_lock and pg_advisory_unlock on it.
func BenchmarkTryLockRelease(b *testing.B) {
	dsn := pgtest.DSN(b)
	b.Run("store", func(b *testing.B) {
		pool := pgtest.Connect(b, dsn, pgtest.PoolConfig{MaxConns: 2, ApplicationName: "bench-store"})
		s := newTestStore(b, pool, Config{})
		runParallel(b, func(ctx context.Context, key lockstore.Key, _ LockID) error {
			l, err := s.TryLock(ctx, key)
			if err != nil {
				return err
			}
			return l.Release(ctx)
		})
		reportBatching(b, s)
	})
	b.Run("baseline_pool8", func(b *testing.B) {
		pool := pgtest.Connect(b, dsn, pgtest.PoolConfig{MaxConns: 8, ApplicationName: "bench-baseline"})
		runParallel(b, func(ctx context.Context, _ lockstore.Key, id LockID) error {
			return baselineLockUnlock(ctx, pool, id)
		})
	})
}

// baselineLockUnlock is the naive form: a pooled connection per call.
func baselineLockUnlock(ctx context.Context, pool *pgxpool.Pool, id LockID) error {
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return err
	}
	defer conn.Release()
	if _, err := conn.Exec(ctx, "SELECT pg_advisory_lock($1, $2)", id.Namespace, id.ID); err != nil {
		return err
	}
	var ok bool
	if err := conn.QueryRow(ctx, "SELECT pg_advisory_unlock($1, $2)", id.Namespace, id.ID).Scan(&ok); err != nil {
		return err
	}
	if !ok {
		return fmt.Errorf("unlock of %v returned false", id)
	}
	return nil
}

// BenchmarkTryLockReleaseSerial is one goroutine's TryLock+Release: the
// latency of one claim, two round trips.
func BenchmarkTryLockReleaseSerial(b *testing.B) {
	pool := pgtest.Pool(b, pgtest.PoolConfig{MaxConns: 2, ApplicationName: "bench-serial"})
	s := newTestStore(b, pool, Config{})
	ctx := context.Background()
	b.ResetTimer()
	for i := range b.N {
		l, err := s.TryLock(ctx, lockstore.Key{Namespace: "bench", ID: fmt.Sprint(i)})
		if err != nil {
			b.Fatal(err)
		}
		if err := l.Release(ctx); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	reportBatching(b, s)
}

// BenchmarkHotKeyHandoff hands one key back and forth between two nodes
// (two stores on two pools), 4 goroutines on each calling Lock and Release:
// one op is one grant.
func BenchmarkHotKeyHandoff(b *testing.B) {
	dsn := pgtest.DSN(b)
	pa := pgtest.Connect(b, dsn, pgtest.PoolConfig{MaxConns: 2, ApplicationName: "bench-a"})
	pb := pgtest.Connect(b, dsn, pgtest.PoolConfig{MaxConns: 2, ApplicationName: "bench-b"})
	stores := []*Store{newTestStore(b, pa, Config{}), newTestStore(b, pb, Config{})}
	key := lockstore.Key{Namespace: "bench", ID: "hot"}
	var n atomic.Int64
	var grants [2]atomic.Int64
	ctx := context.Background()
	b.SetParallelism(4)
	b.ResetTimer()
	b.RunParallel(func(p *testing.PB) {
		node := int(n.Add(1) % 2)
		s := stores[node]
		for p.Next() {
			l, err := s.Lock(ctx, key)
			if err != nil {
				b.Error(err)
				return
			}
			grants[node].Add(1)
			if err := l.Release(ctx); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.StopTimer()
	total := grants[0].Load() + grants[1].Load()
	if total > 0 {
		b.ReportMetric(float64(grants[1].Load())/float64(total), "share_b")
	}
}

func runtimeProcs() int { return runtime.GOMAXPROCS(0) }

// reportBatching reports the round trips per op and the requests each
// round trip carried.
func reportBatching(b *testing.B, s *Store) {
	var trips, reqs int64
	for _, c := range s.lockConns() {
		trips += c.roundTrips.Load()
		reqs += c.requests.Load()
	}
	if trips > 0 {
		b.ReportMetric(float64(trips)/float64(b.N), "roundtrips/op")
		b.ReportMetric(float64(reqs)/float64(trips), "requests/roundtrip")
	}
}
