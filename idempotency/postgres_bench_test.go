package idempotency_test

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/claimbus/claimbus/claimstore"
	"github.com/claimbus/claimbus/idempotency"
	"github.com/claimbus/claimbus/internal/pgtest"
	"github.com/claimbus/claimbus/lockstore"
	"github.com/claimbus/claimbus/lockstore/postgres"
	"github.com/claimbus/claimbus/middleware"
)

// countingLocker counts the calls that reach the database through a
// Locker: each TryLock, Lock and Release is one statement of the
// PostgreSQL store.
type countingLocker struct {
	lockstore.Locker
	calls atomic.Int64
}

func (c *countingLocker) TryLock(ctx context.Context, key lockstore.Key) (lockstore.Lock, error) {
	return c.count(c.Locker.TryLock(ctx, key))
}

func (c *countingLocker) Lock(ctx context.Context, key lockstore.Key) (lockstore.Lock, error) {
	return c.count(c.Locker.Lock(ctx, key))
}

// count counts a lock call that returned lk, err, and wraps lk so that its
// Release is counted.
func (c *countingLocker) count(lk lockstore.Lock, err error) (lockstore.Lock, error) {
	c.calls.Add(1)
	if err != nil {
		return nil, err
	}
	return &countingLock{Lock: lk, calls: &c.calls}, nil
}

type countingLock struct {
	lockstore.Lock
	calls *atomic.Int64
}

func (l *countingLock) Release(ctx context.Context) error {
	l.calls.Add(1)
	return l.Lock.Release(ctx)
}

// BenchmarkPostgres runs Pays one at a time through a middleware.Runner
// with the idempotency middleware on lockstore/postgres (the outcomes in
// memory: claimstore/postgres is not there yet), each op a new key
// (newkey) or the same key (repeat), against the same runner without the
// middleware (baseline). Metrics: lock-calls/op (lock statements: TryLock,
// Lock, Release) and store-calls/op (Outcome, SaveOutcome: one statement
// each on a database store).
func BenchmarkPostgres(b *testing.B) {
	pool := pgtest.Pool(b, pgtest.PoolConfig{MaxConns: 8})
	store, err := postgres.New(context.Background(), pool, postgres.Config{})
	require.NoError(b, err)
	b.Cleanup(func() { require.NoError(b, store.Close()) })
	ctx := context.Background()
	h := func(_ context.Context, p *middleware.Pipeline) (any, error) {
		return Receipt{Amount: p.Command.(*Pay).Amount}, nil
	}
	cases := []struct {
		name  string
		idem  bool
		keyOf func(i int) string
	}{
		{"baseline", false, strconv.Itoa},
		{"newkey", true, func(i int) string { return "new-" + strconv.Itoa(i) }},
		{"repeat", true, func(int) string { return "same" }},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			locker := &countingLocker{Locker: store}
			outcomes := &faultyStore{Outcomes: claimstore.NewMemory(claimstore.MemoryConfig{})}
			var mws []middleware.Middleware
			if c.idem {
				m, err := idempotency.New(idempotency.Config{Locker: locker, Store: outcomes, Retention: time.Hour, Key: payKey})
				require.NoError(b, err)
				mws = append(mws, m)
			}
			r, err := middleware.NewRunner(middleware.RunnerConfig{Middleware: mws})
			require.NoError(b, err)
			run := func(key string) {
				p := middleware.NewPipeline(ctx, &Pay{Key: key, Amount: 5})
				p.CommandName = "Pay"
				if _, err := r.Run(ctx, p, h); err != nil {
					b.Fatal(err)
				}
			}
			run(c.keyOf(0)) // the repeat's first run
			locker.calls.Store(0)
			l0, s0, _ := outcomes.counts()
			i := 0
			for b.Loop() {
				i++
				run(c.keyOf(i))
			}
			l1, s1, _ := outcomes.counts()
			b.ReportMetric(float64(locker.calls.Load())/float64(i), "lock-calls/op")
			b.ReportMetric(float64(l1-l0+s1-s0)/float64(i), "store-calls/op")
		})
	}
}
