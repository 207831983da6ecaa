package idempotency_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	claimpg "github.com/claimbus/claimbus/claimstore/postgres"
	"github.com/claimbus/claimbus/idempotency"
	"github.com/claimbus/claimbus/internal/pgtest"
	"github.com/claimbus/claimbus/lockstore/postgres"
	"github.com/claimbus/claimbus/middleware"
)

// BenchmarkPostgres runs Pays one at a time through a middleware.Runner
// with the idempotency middleware on lockstore/postgres and
// claimstore/postgres, each op a new key
// (newkey) or the same key (repeat), with Config.ReadFirst or not
// (-readfirst), against the same runner without the middleware
// (baseline). Metrics: lock-calls/op (lock statements: TryLock,
// Lock, Release) and store-calls/op (Outcome, SaveOutcome: one statement
// each on a database store).
func BenchmarkPostgres(b *testing.B) {
	pool := pgtest.Pool(b, pgtest.PoolConfig{MaxConns: 8})
	store, err := postgres.New(context.Background(), pool, postgres.Config{})
	require.NoError(b, err)
	b.Cleanup(func() { require.NoError(b, store.Close()) })
	ctx := context.Background()
	pgOutcomes, err := claimpg.New(ctx, pool, claimpg.Config{})
	require.NoError(b, err)
	h := func(_ context.Context, p *middleware.Pipeline) (any, error) {
		return Receipt{Amount: p.Command.(*Pay).Amount}, nil
	}
	newKey := func(i int) string { return "new-" + strconv.Itoa(i) }
	sameKey := func(int) string { return "same" }
	cases := []struct {
		name            string
		idem, readFirst bool
		keyOf           func(i int) string
	}{
		{"baseline", false, false, strconv.Itoa},
		{"newkey", true, false, newKey},
		{"repeat", true, false, sameKey},
		{"newkey-readfirst", true, true, newKey},
		{"repeat-readfirst", true, true, sameKey},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			locker := &countingLocker{Locker: store}
			outcomes := &faultyStore{Outcomes: pgOutcomes}
			var mws []middleware.Middleware
			if c.idem {
				m, err := idempotency.New(idempotency.Config{
					Locker: locker, Store: outcomes, Retention: time.Hour, Key: payKey, ReadFirst: c.readFirst,
				})
				require.NoError(b, err)
				mws = append(mws, m)
			}
			r, err := middleware.NewRunner(middleware.RunnerConfig{Middleware: mws})
			require.NoError(b, err)
			// Keys are per case and per run: the outcome table is shared
			// by the cases, and by the runs of -count.
			prefix := c.name + uuid.NewString()
			run := func(key string) {
				p := middleware.NewPipeline(ctx, &Pay{Key: key, Amount: 5})
				p.CommandName = "Pay"
				if _, err := r.Run(ctx, p, h); err != nil {
					b.Fatal(err)
				}
			}
			run(prefix + c.keyOf(0)) // the repeat's first run
			locker.calls.Store(0)
			l0, s0, _ := outcomes.counts()
			i := 0
			for b.Loop() {
				i++
				run(prefix + c.keyOf(i))
			}
			l1, s1, _ := outcomes.counts()
			b.ReportMetric(float64(locker.calls.Load())/float64(i), "lock-calls/op")
			b.ReportMetric(float64(l1-l0+s1-s0)/float64(i), "store-calls/op")
		})
	}
}
