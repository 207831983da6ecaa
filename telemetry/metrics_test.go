package telemetry_test

import (
	"context"
	"fmt"
	"runtime"
	"testing"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/claimbus/claimbus/bus"
	"github.com/claimbus/claimbus/lockstore"
	"github.com/claimbus/claimbus/middleware"
	"github.com/claimbus/claimbus/telemetry"
)

// collect reads every metric of r by name.
func collect(t *testing.T, r sdkmetric.Reader) map[string]metricdata.Aggregation {
	t.Helper()
	var rm metricdata.ResourceMetrics
	require.NoError(t, r.Collect(context.Background(), &rm))
	out := make(map[string]metricdata.Aggregation)
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			out[m.Name] = m.Data
		}
	}
	return out
}

// sumOf returns the sum of the int counter points of agg whose attributes
// include want.
func sumOf(t *testing.T, agg metricdata.Aggregation, want ...attribute.KeyValue) int64 {
	t.Helper()
	var points []metricdata.DataPoint[int64]
	switch a := agg.(type) {
	case metricdata.Sum[int64]:
		points = a.DataPoints
	case metricdata.Gauge[int64]:
		points = a.DataPoints
	default:
		t.Fatalf("not an int sum or gauge: %T", agg)
	}
	var n int64
	for _, p := range points {
		if hasAll(p.Attributes, want) {
			n += p.Value
		}
	}
	return n
}

// histCount returns how many values the histogram points of agg whose
// attributes include want counted.
func histCount(t *testing.T, agg metricdata.Aggregation, want ...attribute.KeyValue) uint64 {
	t.Helper()
	h, ok := agg.(metricdata.Histogram[float64])
	require.True(t, ok, "not a float histogram: %T", agg)
	var n uint64
	for _, p := range h.DataPoints {
		if hasAll(p.Attributes, want) {
			n += p.Count
		}
	}
	return n
}

func hasAll(set attribute.Set, want []attribute.KeyValue) bool {
	for _, kv := range want {
		if v, ok := set.Value(kv.Key); !ok || v != kv.Value {
			return false
		}
	}
	return true
}

// TestMetrics runs commands that succeed, are rejected and fail on an
// in-process bus, and checks every count.
func TestMetrics(t *testing.T) {
	t.Parallel()
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { require.NoError(t, mp.Shutdown(context.Background())) })
	tel, err := telemetry.New(telemetry.Config{MeterProvider: mp})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, tel.Close()) })

	db := &users{emails: map[string]bool{}}
	unique, store := newUnique(t, db)
	require.NoError(t, tel.ObserveLocker("memory", store))
	require.NoError(t, tel.ObserveClaims("users", unique))
	bb := startBus(t, bus.Config{OnSend: tel.OnSend, Middleware: middlewares(tel, unique)}, db)
	ctx := context.Background()

	const created, duplicates, failed = 5, 3, 2
	for i := range created {
		_, err := bus.Dispatch[string](ctx, bb, &CreateUser{ID: fmt.Sprint(i), Email: fmt.Sprintf("u%d@example.com", i)})
		require.NoError(t, err)
	}
	for i := range duplicates {
		_, err := bus.Dispatch[string](ctx, bb, &CreateUser{ID: "d", Email: fmt.Sprintf("u%d@example.com", i)})
		require.ErrorIs(t, err, middleware.ErrAlreadyTaken)
	}
	for i := range failed {
		_, err := bus.Dispatch[string](ctx, bb, &CreateUser{ID: "f", Email: fmt.Sprintf("f%d@example.com", i), Fail: true})
		require.Error(t, err)
	}

	// A lock held outside any command, and a waiter behind it.
	key := lockstore.Key{Namespace: "other", ID: "k"}
	lk, err := store.Lock(ctx, key)
	require.NoError(t, err)
	waitCtx, cancelWait := context.WithCancel(ctx)
	waited := make(chan error, 1)
	go func() {
		_, err := store.Lock(waitCtx, key)
		waited <- err
	}()
	for store.Waiting(key) == 0 {
		// Waiting turns 1 once the waiter queued; nothing else can.
		runtime.Gosched()
	}

	m := collect(t, reader)
	name := attrCommandName.String(bb.CommandName(&CreateUser{}))
	require.EqualValues(t, created, histCount(t, m[metricCommandDuration], name, attrOutcome.String("ok")))
	require.EqualValues(t, duplicates, histCount(t, m[metricCommandDuration], name, attrOutcome.String("rejected")))
	require.EqualValues(t, failed, histCount(t, m[metricCommandDuration], name, attrOutcome.String("error")))
	require.EqualValues(t, duplicates, sumOf(t, m[metricRejections],
		attrRejectionCode.String(middleware.CodeAlreadyTaken), attrRejectionField.String("email")))
	// A duplicate's wait ended in already_taken: an answer, not a failure.
	require.EqualValues(t, created+failed+duplicates, histCount(t, m[metricClaimWait],
		attrField.String("email"), attrStepFailed.Bool(false)))
	require.Zero(t, histCount(t, m[metricClaimWait], attrStepFailed.Bool(true)))
	require.EqualValues(t, created+failed, histCount(t, m[metricClaimHold], name))
	mem := attrStore.String("memory")
	require.EqualValues(t, 1, sumOf(t, m[metricLocksHeld], mem))
	require.EqualValues(t, 1, sumOf(t, m[metricLocksWaiting], mem))
	require.EqualValues(t, 0, sumOf(t, m[metricClaimsHeld], attrStore.String("users")))

	cancelWait()
	require.ErrorIs(t, <-waited, context.Canceled)
	require.NoError(t, lk.Release(ctx))
	m = collect(t, reader)
	require.EqualValues(t, 0, sumOf(t, m[metricLocksHeld], mem))
	require.EqualValues(t, 0, sumOf(t, m[metricLocksWaiting], mem))
}

// statsSource reports fixed lockstore.Stats, each counter a distinct value.
type statsSource lockstore.Stats

func (s statsSource) Stats() lockstore.Stats { return lockstore.Stats(s) }

// TestLockerStatsMetrics: each counter of a store's lockstore.Stats is
// observed under its own instrument.
func TestLockerStatsMetrics(t *testing.T) {
	t.Parallel()
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { require.NoError(t, mp.Shutdown(context.Background())) })
	tel, err := telemetry.New(telemetry.Config{MeterProvider: mp})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, tel.Close()) })
	stats := lockstore.Stats{Held: 1, Waiting: 2, Conns: 8, RoundTrips: 3, BatchedRequests: 4, Reconnects: 5,
		LocksLost: 6, CapacityRefusals: 7}
	require.NoError(t, tel.ObserveLocker("pg", statsSource(stats)))

	m := collect(t, reader)
	pg := attrStore.String("pg")
	for name, want := range map[string]int64{
		metricLocksHeld:        stats.Held,
		metricLocksWaiting:     stats.Waiting,
		metricRoundTrips:       stats.RoundTrips,
		metricBatchedRequests:  stats.BatchedRequests,
		metricReconnects:       stats.Reconnects,
		metricLockConns:        stats.Conns,
		metricLocksLost:        stats.LocksLost,
		metricCapacityRefusals: stats.CapacityRefusals,
	} {
		require.Contains(t, m, name)
		require.Equal(t, want, sumOf(t, m[name], pg), name)
	}
}
