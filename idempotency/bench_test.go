package idempotency_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/claimbus/claimbus/bus"
	"github.com/claimbus/claimbus/claimstore"
	"github.com/claimbus/claimbus/idempotency"
	"github.com/claimbus/claimbus/lockstore"
	"github.com/claimbus/claimbus/middleware"
)

// benchPipelines are the ways each benchmark sends a Pay: straight through
// a middleware.Runner (the middleware's own cost), and through an
// in-process bus (with the bus's encoding and reply, as an app sees it).
// run sends a Pay with key through mws and fails the benchmark on an error.
type benchPipeline struct {
	name string
	make func(b *testing.B, mws []middleware.Middleware) (run func(key string))
}

var benchPipelines = []benchPipeline{
	{"runner", func(b *testing.B, mws []middleware.Middleware) func(string) {
		r, err := middleware.NewRunner(middleware.RunnerConfig{Middleware: mws})
		require.NoError(b, err)
		ctx := context.Background()
		h := func(_ context.Context, p *middleware.Pipeline) (any, error) {
			return Receipt{Amount: p.Command.(*Pay).Amount}, nil
		}
		return func(key string) {
			p := middleware.NewPipeline(ctx, &Pay{Key: key, Amount: 5})
			p.CommandName = "Pay"
			if _, err := r.Run(ctx, p, h); err != nil {
				b.Fatal(err)
			}
		}
	}},
	{"bus", func(b *testing.B, mws []middleware.Middleware) func(string) {
		bb, err := bus.New(bus.Config{Middleware: mws})
		require.NoError(b, err)
		require.NoError(b, bus.Handle(bb, func(_ context.Context, c *Pay) (Receipt, error) { return Receipt{Amount: c.Amount}, nil }))
		require.NoError(b, bb.Start(context.Background()))
		b.Cleanup(func() { require.NoError(b, bb.Close()) })
		ctx := context.Background()
		return func(key string) {
			if _, err := bus.Dispatch[Receipt](ctx, bb, &Pay{Key: key, Amount: 5}); err != nil {
				b.Fatal(err)
			}
		}
	}},
}

// benchMiddleware is the idempotency middleware on memory backends.
func benchMiddleware(b *testing.B) middleware.Middleware {
	locker, err := lockstore.NewMemory(lockstore.MemoryConfig{})
	require.NoError(b, err)
	b.Cleanup(func() { require.NoError(b, locker.Close()) })
	m, err := idempotency.New(idempotency.Config{
		Locker: locker, Store: claimstore.NewMemory(claimstore.MemoryConfig{}), Retention: time.Hour, Key: payKey,
	})
	require.NoError(b, err)
	return m
}

// runEach runs the benchmark in each pipeline, sending the key keyOf(i)
// at the i-th op, after setup.
func runEach(b *testing.B, idem bool, keyOf func(i int) string, setup func(run func(string))) {
	for _, bp := range benchPipelines {
		b.Run(bp.name, func(b *testing.B) {
			var mws []middleware.Middleware
			if idem {
				mws = append(mws, benchMiddleware(b))
			}
			run := bp.make(b, mws)
			if setup != nil {
				setup(run)
			}
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				i++
				run(keyOf(i))
			}
		})
	}
}

// BenchmarkBaseline is the pipeline of BenchmarkNewKey without the
// middleware.
func BenchmarkBaseline(b *testing.B) {
	runEach(b, false, strconv.Itoa, nil)
}

// BenchmarkNewKey sends each op a command with a key never seen: lock,
// lookup, handler, store, release.
func BenchmarkNewKey(b *testing.B) {
	runEach(b, true, strconv.Itoa, nil)
}

// BenchmarkRepeat sends each op the same key, answered from the store:
// lock, lookup, release, no handler.
func BenchmarkRepeat(b *testing.B) {
	runEach(b, true, func(int) string { return "same" }, func(run func(string)) { run("same") })
}
