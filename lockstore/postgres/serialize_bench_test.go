package postgres

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/claimbus/claimbus/internal/pgtest"
	"github.com/claimbus/claimbus/lockstore"
)

// serialBench is one Serialize benchmark's setup: a pool that counts
// round trips, a store on it, and the two forms under comparison.
type serialBench struct {
	writes    serialWrites
	pool      *pgxpool.Pool
	serialize func(ctx context.Context) error
	naive     func(ctx context.Context) error
}

func newSerialBench(b *testing.B) *serialBench {
	sb := &serialBench{}
	sb.pool = serialCountingPool(b, pgtest.DSN(b), 2, &sb.writes)
	// A long KeepAlive: the store's idle lock connections, dialed with the
	// pool's configuration, would otherwise add their pings to the count.
	s := newTestStore(b, sb.pool, Config{LeaseBound: 2 * time.Hour, KeepAlive: time.Hour})
	key := lockstore.Key{Namespace: "bench", ID: "uncontended"}
	id := serialLockID(b, s, key)
	nop := func(context.Context, pgx.Tx) (struct{}, error) { return struct{}{}, nil }
	sb.serialize = func(ctx context.Context) error { _, err := runSerialize(ctx, s, key, nop); return err }
	sb.naive = func(ctx context.Context) error { return naiveSerialize(ctx, sb.pool, id) }
	// Warm: connections made, statements prepared and cached.
	for range 3 {
		require.NoError(b, sb.serialize(context.Background()))
		require.NoError(b, sb.naive(context.Background()))
	}
	return sb
}

// BenchmarkSerializeUncontended compares Serialize with the naive form it
// replaces (the baseline: Begin; SELECT pg_advisory_xact_lock; Commit),
// one caller, one key, fn doing nothing, on the same pool. It reports the
// round trips per op, counted as writes on the pool's connections: 2 for
// Serialize (BEGIN and the lock in one batch, then COMMIT), 3 for the naive
// form. The target is at most 0.75 of the naive time per op (medians of
// -count 5); see also BenchmarkSerializeVsNaive, which is steadier on a
// shared machine.
func BenchmarkSerializeUncontended(b *testing.B) {
	sb := newSerialBench(b)
	run := func(b *testing.B, ctx context.Context, op func(context.Context) error) {
		before := sb.writes.n.Load()
		ops := 0
		for b.Loop() {
			if err := op(ctx); err != nil {
				b.Fatal(err)
			}
			ops++
		}
		b.ReportMetric(float64(sb.writes.n.Load()-before)/float64(ops), "roundtrips/op")
	}
	b.Run("Serialize", func(b *testing.B) { run(b, context.Background(), sb.serialize) })
	b.Run("Serialize/deadline", func(b *testing.B) {
		// With a deadline, the same batch also sets lock_timeout.
		ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
		defer cancel()
		run(b, ctx, sb.serialize)
	})
	b.Run("naive", func(b *testing.B) { run(b, context.Background(), sb.naive) })
}

// BenchmarkSerializeVsNaive runs one Serialize and one naive op per
// iteration, alternating which goes first, and reports the median time of
// each and their ratio. Interleaving exposes both forms to the same load,
// which on a machine shared with other work drifts more between two
// sub-benchmarks than the difference being measured. ns/op is the pair.
func BenchmarkSerializeVsNaive(b *testing.B) {
	sb := newSerialBench(b)
	ctx := context.Background()
	var ser, naive []time.Duration
	var serTrips, naiveTrips int64
	timed := func(op func(context.Context) error, d *[]time.Duration, trips *int64) {
		w := sb.writes.n.Load()
		start := time.Now()
		if err := op(ctx); err != nil {
			b.Fatal(err)
		}
		*d = append(*d, time.Since(start))
		*trips += sb.writes.n.Load() - w
	}
	i := 0
	for b.Loop() {
		if i%2 == 0 {
			timed(sb.serialize, &ser, &serTrips)
			timed(sb.naive, &naive, &naiveTrips)
		} else {
			timed(sb.naive, &naive, &naiveTrips)
			timed(sb.serialize, &ser, &serTrips)
		}
		i++
	}
	median := func(d []time.Duration) float64 {
		slices.Sort(d)
		return float64(d[len(d)/2].Nanoseconds())
	}
	b.ReportMetric(median(ser), "serialize-ns/op")
	b.ReportMetric(median(naive), "naive-ns/op")
	b.ReportMetric(median(ser)/median(naive), "ratio")
	b.ReportMetric(float64(serTrips)/float64(i), "serialize-roundtrips/op")
	b.ReportMetric(float64(naiveTrips)/float64(i), "naive-roundtrips/op")
}
