package postgres_test

import (
	"context"
	"fmt"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/claimbus/claimbus/claimstore/postgres"
	"github.com/claimbus/claimbus/internal/pgtest"
	"github.com/claimbus/claimbus/lockstore"
)

// benchSenders is how many goroutines send at once in the benchmarks: the
// 64 concurrent senders of a storm.
const benchSenders = 64

// benchPoolConns is the pool size of both benchmarks, so that they compare
// the statements, not the pools.
const benchPoolConns = 16

// setSenders makes b.RunParallel run about benchSenders goroutines.
func setSenders(b *testing.B) {
	b.SetParallelism((benchSenders + runtime.GOMAXPROCS(0) - 1) / runtime.GOMAXPROCS(0))
}

// BenchmarkReserveConfirm measures a reservation's cost to a claim: Reserve
// then Confirm of a distinct key, from 64 goroutines. Compare it with
// BenchmarkInsertOnConflictFloor.
func BenchmarkReserveConfirm(b *testing.B) {
	dsn := pgtest.DSN(b)
	s := newStore(b, dsn, postgres.Config{})
	var seq atomic.Int64
	ctx := context.Background()
	setSenders(b)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			n := seq.Add(1)
			k := lockstore.Key{Namespace: "bench", ID: fmt.Sprint(n)}
			owner := "cmd-" + fmt.Sprint(n)
			if _, ok, err := s.Reserve(ctx, k, owner, time.Minute); err != nil || !ok {
				b.Errorf("reserve %v: %v, %v", k, ok, err)
				return
			}
			if err := s.Confirm(ctx, k, owner); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

// BenchmarkInsertOnConflictFloor is the floor a claim pays without a
// reservation: one bare INSERT ... ON CONFLICT DO NOTHING of a distinct
// key into a table with a unique index, per claim, from 64 goroutines.
func BenchmarkInsertOnConflictFloor(b *testing.B) {
	pool := pgtest.Connect(b, pgtest.DSN(b), pgtest.PoolConfig{MaxConns: benchPoolConns})
	ctx := context.Background()
	if _, err := pool.Exec(ctx, "CREATE TABLE floor (namespace text NOT NULL, id text NOT NULL, UNIQUE (namespace, id))"); err != nil {
		b.Fatal(err)
	}
	var seq atomic.Int64
	setSenders(b)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := pool.Exec(ctx, "INSERT INTO floor (namespace, id) VALUES ($1, $2) ON CONFLICT DO NOTHING",
				"bench", fmt.Sprint(seq.Add(1))); err != nil {
				b.Error(err)
				return
			}
		}
	})
}
