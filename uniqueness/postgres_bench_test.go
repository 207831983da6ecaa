package uniqueness_test

import (
	"context"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/claimbus/claimbus/bus"
	"github.com/claimbus/claimbus/commands"
	"github.com/claimbus/claimbus/internal/pgtest"
	"github.com/claimbus/claimbus/middleware"
	"github.com/claimbus/claimbus/telemetry/telemetrytest"
	"github.com/claimbus/claimbus/uniqueness"
)

// pgBenchSenders is how many goroutines send at once in the PostgreSQL
// benchmarks.
const pgBenchSenders = 64

// pgBenchConns is the pool size of both sides of the comparison.
const pgBenchConns = 16

// BenchmarkPostgresStorm compares, with pgBenchSenders concurrent senders
// of distinct emails on one PostgreSQL database whose staff table starts
// with stormTableRows analyzed rows (see newStormTable):
//   - floor: a bare INSERT ... ON CONFLICT DO NOTHING on the unique index,
//     the least PostgreSQL does to enforce uniqueness;
//   - runner: CreateStaff run through a middleware.Runner with the
//     Uniqueness middleware on the PostgreSQL store, whose lookup reads the
//     staff table and whose handler inserts into it;
//   - bus: the same, sent with Dispatch on an in-process bus;
//   - runner-reserved, bus-reserved: the same with a reservation per
//     claim (Reserve, on claimstore/postgres);
//   - each bus variant again with -telemetry: the telemetry middleware
//     first and OnSend, on real SDK providers (every span sampled).
//
// Compare the ops/s metrics.
func BenchmarkPostgresStorm(b *testing.B) {
	ctx := context.Background()
	pool, table, email := newStormTable(b)

	b.Run("floor", func(b *testing.B) {
		b.SetParallelism(parallelism())
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if err := floorInsert(ctx, pool, email()); err != nil {
					b.Error(err)
					return
				}
			}
		})
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "ops/s")
	})

	reservations := newReservations(b, pool)
	for _, variant := range []struct {
		suffix string
		extra  []uniqueness.Option
	}{
		{"", nil},
		{"-reserved", []uniqueness.Option{uniqueness.Reserve(reservations, time.Minute)}},
	} {
		suffix := variant.suffix
		rule := emailRuleWith(table, table.taken, variant.extra...)
		b.Run("runner"+suffix, func(b *testing.B) {
			store := newPGStore(b, pool)
			h := &staffHandler{table: table}
			mw := newUniqueness(b, uniqueness.Config{Locker: store, Rules: []uniqueness.Rule{rule}})
			runner, err := middleware.NewRunner(middleware.RunnerConfig{Middleware: []middleware.Middleware{mw}})
			require.NoError(b, err)
			handle := func(ctx context.Context, p *middleware.Pipeline) (any, error) {
				return h.handle(ctx, p.Command.(*commands.CreateStaff))
			}
			b.ResetTimer()
			b.SetParallelism(parallelism())
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					e := email()
					cmd := &commands.CreateStaff{StaffID: e, Email: e, Name: "N"}
					if _, err := runner.Run(ctx, middleware.NewPipeline(ctx, cmd), handle); err != nil {
						b.Error(err)
						return
					}
				}
			})
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "ops/s")
			require.Zero(b, h.duplicates.Load())
		})

		for _, withTelemetry := range []bool{false, true} {
			name := "bus" + suffix
			if withTelemetry {
				name += "-telemetry"
			}
			b.Run(name, func(b *testing.B) {
				store := newPGStore(b, pool)
				h := &staffHandler{table: table}
				mw := newUniqueness(b, uniqueness.Config{Locker: store, Rules: []uniqueness.Rule{rule}})
				cfg := bus.Config{Middleware: []middleware.Middleware{mw}, HandlerConcurrency: pgBenchSenders}
				if withTelemetry {
					tel := telemetrytest.New(b, sdktrace.AlwaysSample())
					require.NoError(b, tel.ObserveLocker("bench", store))
					cfg.Middleware, cfg.OnSend = []middleware.Middleware{tel, mw}, tel.OnSend
				}
				bb := newBus(b, cfg, h)
				b.ResetTimer()
				b.SetParallelism(parallelism())
				b.RunParallel(func(pb *testing.PB) {
					for pb.Next() {
						e := email()
						if _, err := bus.Dispatch[string](ctx, bb, &commands.CreateStaff{StaffID: e, Email: e, Name: "N"}); err != nil {
							b.Error(err)
							return
						}
					}
				})
				b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "ops/s")
				require.Zero(b, h.duplicates.Load())
			})
		}
	}
}

// BenchmarkPostgresStormSenders is the claim storm of BenchmarkPostgresStorm
// at 1, 8, 64 and 256 senders, in one run on one database and one pool of
// pgBenchConns: impl=floor, the bare INSERT ... ON CONFLICT DO NOTHING;
// impl=claimbus, CreateStaff sent with Dispatch on an in-process bus with
// the Uniqueness middleware on the PostgreSQL store and the lookup a
// uniqueness.FieldSQL, run in the lock's round trip. `benchstat -col /impl` prints the ratio per senders
// count; ops/s is the throughput.
func BenchmarkPostgresStormSenders(b *testing.B) {
	ctx := context.Background()
	pool, table, email := newStormTable(b)
	rule := emailRuleSQL(table, pool, staffTakenSQL)
	for _, senders := range []int{1, 8, 64, 256} {
		b.Run("senders="+strconv.Itoa(senders)+"/impl=floor", func(b *testing.B) {
			sendFrom(b, senders, func() error { return floorInsert(ctx, pool, email()) })
		})
		b.Run("senders="+strconv.Itoa(senders)+"/impl=claimbus", func(b *testing.B) {
			store := newPGStore(b, pool)
			h := &staffHandler{table: table}
			mw := newUniqueness(b, uniqueness.Config{Locker: store, Rules: []uniqueness.Rule{rule}})
			bb := newBus(b, bus.Config{Middleware: []middleware.Middleware{mw}, HandlerConcurrency: senders}, h)
			sendFrom(b, senders, func() error {
				e := email()
				_, err := bus.Dispatch[string](ctx, bb, &commands.CreateStaff{StaffID: e, Email: e, Name: "N"})
				return err
			})
			require.Zero(b, h.duplicates.Load())
		})
	}
}

// stormTableRows is how many members the storm's staff table holds before
// a benchmark starts.
const stormTableRows = 100_000

// newStormTable returns the storm benchmarks' pool of pgBenchConns, the
// staff table on it and a source of distinct emails. The table starts with
// stormTableRows members and its statistics, as a table in service has
// them (autovacuum analyzes it): on a new, never-analyzed table the
// planner's generic plan for a lookup of email = ANY($1) (the batched
// lookup, the probe) is a sequential scan, which grows with the table the
// storm fills and measures the missing statistics rather than the claims.
func newStormTable(b *testing.B) (*pgxpool.Pool, *pgTable, func() string) {
	b.Helper()
	pool := pgtest.Pool(b, pgtest.PoolConfig{MaxConns: pgBenchConns})
	table := newPGTable(b, pool)
	ctx := context.Background()
	_, err := pool.Exec(ctx, `INSERT INTO staff (id, email, name)
		SELECT 'seed' || i, 'seed' || i || '@x.org', 'S' FROM generate_series(1, $1) i`, stormTableRows)
	require.NoError(b, err)
	_, err = pool.Exec(ctx, "ANALYZE staff")
	require.NoError(b, err)
	var seq atomic.Int64
	email := func() string { return "user" + strconv.FormatInt(seq.Add(1), 10) + "@x.org" }
	return pool, table, email
}

// floorInsert is the floor's whole work for one claim: a bare INSERT ...
// ON CONFLICT DO NOTHING of email on the unique index.
func floorInsert(ctx context.Context, pool *pgxpool.Pool, email string) error {
	_, err := pool.Exec(ctx, "INSERT INTO staff (id, email, name) VALUES ($1, $2, $3) ON CONFLICT DO NOTHING",
		email, email, "N")
	return err
}

// sendFrom runs send b.N times from senders goroutines and reports ops/s.
func sendFrom(b *testing.B, senders int, send func() error) {
	b.Helper()
	var wg sync.WaitGroup
	var left atomic.Int64
	left.Store(int64(b.N))
	b.ResetTimer()
	for range senders {
		wg.Go(func() {
			for left.Add(-1) >= 0 {
				if err := send(); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "ops/s")
}

// parallelism returns what makes RunParallel start pgBenchSenders
// goroutines: it starts SetParallelism times GOMAXPROCS.
func parallelism() int { return max(1, pgBenchSenders/runtime.GOMAXPROCS(0)) }
