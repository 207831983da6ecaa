package postgres

import (
	"context"
	"database/sql"
	"fmt"
	"runtime"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3/lock"

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

// BenchmarkTryLockRelease compares, in one run on one server, the store's
// TryLock and Release on distinct keys (64 goroutines, the default 2 lock
// connections; impl=claimbus) with two baselines doing the same lock and
// unlock per key: impl=pgxpool, issue 3's, where each call takes a
// connection from a pool of 8 and runs pg_advisory_lock and
// pg_advisory_unlock on it; impl=goose, pressly/goose's session locker (one
// per key, as its lock ID is fixed) on a database/sql pool of 8 over pgx.
// `benchstat -col /impl` prints the ratios.
func BenchmarkTryLockRelease(b *testing.B) {
	benchLockRelease(b, (*Store).TryLock, true)
}

// BenchmarkLockRelease is BenchmarkTryLockRelease with the blocking Lock
// (impl=claimbus and impl=pgxpool only).
func BenchmarkLockRelease(b *testing.B) {
	benchLockRelease(b, (*Store).Lock, false)
}

// benchLockRelease takes and releases distinct keys from 64 goroutines:
// with take on a store over a pool of 2 (impl=claimbus), against the
// baselines on pools of 8 (impl=pgxpool, and impl=goose when goose is set).
func benchLockRelease(b *testing.B, take func(*Store, context.Context, lockstore.Key) (lockstore.Lock, error), goose bool) {
	dsn := pgtest.DSN(b)
	b.Run("impl=claimbus", func(b *testing.B) {
		pool := pgtest.Connect(b, dsn, pgtest.PoolConfig{MaxConns: 2, ApplicationName: "bench-store"})
		s := newTestStore(b, pool, Config{})
		runParallel(b, func(ctx context.Context, key lockstore.Key, _ LockID) error {
			l, err := take(s, ctx, key)
			if err != nil {
				return err
			}
			return l.Release(ctx)
		})
		reportBatching(b, s)
	})
	b.Run("impl=pgxpool", func(b *testing.B) {
		pool := pgtest.Connect(b, dsn, pgtest.PoolConfig{MaxConns: 8, ApplicationName: "bench-baseline"})
		runParallel(b, func(ctx context.Context, _ lockstore.Key, id LockID) error {
			return baselineLockUnlock(ctx, pool, id)
		})
	})
	if !goose {
		return
	}
	b.Run("impl=goose", func(b *testing.B) {
		pool := pgtest.Connect(b, dsn, pgtest.PoolConfig{MaxConns: 8, ApplicationName: "bench-goose"})
		db := stdlib.OpenDBFromPool(pool)
		b.Cleanup(func() { _ = db.Close() })
		db.SetMaxOpenConns(8)
		db.SetMaxIdleConns(8)
		runParallel(b, func(ctx context.Context, _ lockstore.Key, id LockID) error {
			return gooseLockUnlock(ctx, db, id)
		})
	})
}

// gooseLockUnlock takes and releases id with goose's session locker on a
// connection of db. The locker's lock ID is one bigint: the two halves of id.
func gooseLockUnlock(ctx context.Context, db *sql.DB, id LockID) error {
	locker, err := lock.NewPostgresSessionLocker(lock.WithLockID(int64(id.Namespace)<<32 | int64(uint32(id.ID))))
	if err != nil {
		return err
	}
	conn, err := db.Conn(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = conn.Close() }()
	if err := locker.SessionLock(ctx, conn); err != nil {
		return err
	}
	return locker.SessionUnlock(ctx, conn)
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

// BenchmarkHotKey64 contends one key from 64 goroutines on one node, in one
// run on one server: impl=claimbus, the store's Lock and Release (the
// default 2 lock connections); impl=pgxpool, a blocking pg_advisory_lock and
// pg_advisory_unlock on a connection taken per call from a pool of 8. One op
// is one grant. goose's session locker has no place here: it polls
// pg_try_advisory_lock at a fixed interval (5s by default) instead of
// waiting in the server's queue.
func BenchmarkHotKey64(b *testing.B) {
	dsn := pgtest.DSN(b)
	key := lockstore.Key{Namespace: "bench", ID: "hot64"}
	id := computeLockID(nil, key)
	hot := func(b *testing.B, op func(ctx context.Context) error) {
		b.Helper()
		b.SetParallelism((benchGoroutines + 1) / max(1, runtimeProcs()))
		ctx := context.Background()
		b.ResetTimer()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if err := op(ctx); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	b.Run("impl=claimbus", func(b *testing.B) {
		pool := pgtest.Connect(b, dsn, pgtest.PoolConfig{MaxConns: 2, ApplicationName: "bench-hot-store"})
		s := newTestStore(b, pool, Config{})
		hot(b, func(ctx context.Context) error {
			l, err := s.Lock(ctx, key)
			if err != nil {
				return err
			}
			return l.Release(ctx)
		})
	})
	b.Run("impl=pgxpool", func(b *testing.B) {
		pool := pgtest.Connect(b, dsn, pgtest.PoolConfig{MaxConns: 8, ApplicationName: "bench-hot-baseline"})
		hot(b, func(ctx context.Context) error { return baselineLockUnlock(ctx, pool, id) })
	})
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
