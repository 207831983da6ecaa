package uniqueness_test

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"
	"github.com/stretchr/testify/require"

	"github.com/claimbus/claimbus/bus"
	"github.com/claimbus/claimbus/commands"
	"github.com/claimbus/claimbus/middleware"
	"github.com/claimbus/claimbus/uniqueness"
)

// goChannelBus starts a bus over a GoChannel with mws and a CreateStaff
// handler that writes nothing.
func goChannelBus(b *testing.B, mws []middleware.Middleware) *bus.Bus {
	ps := gochannel.NewGoChannel(gochannel.Config{}, watermill.NopLogger{})
	bb, err := bus.New(bus.Config{Publisher: ps, Subscriber: ps, Middleware: mws})
	require.NoError(b, err)
	require.NoError(b, bus.Handle(bb, func(_ context.Context, c *commands.CreateStaff) (string, error) {
		return c.StaffID, nil
	}))
	require.NoError(b, bb.Start(context.Background()))
	b.Cleanup(func() {
		require.NoError(b, bb.Close())
		require.NoError(b, ps.Close())
	})
	return bb
}

// BenchmarkDispatchCreateStaff dispatches CreateStaff commands, each with
// its own email, over a GoChannel, without and with the Uniqueness
// middleware (memory locker, lookup in a map); the difference is the
// middleware's overhead.
func BenchmarkDispatchCreateStaff(b *testing.B) {
	for _, with := range []bool{false, true} {
		name := "without"
		if with {
			name = "uniqueness"
		}
		b.Run(name, func(b *testing.B) {
			var mws []middleware.Middleware
			if with {
				table := newMemTable()
				mws = append(mws, newUniqueness(b, uniqueness.Config{
					Locker: newMemory(b), Rules: []uniqueness.Rule{emailRule(table)},
				}))
			}
			bb := goChannelBus(b, mws)
			ctx := context.Background()
			b.Run("serial", func(b *testing.B) {
				b.ReportAllocs()
				i := 0
				for b.Loop() {
					i++
					cmd := &commands.CreateStaff{StaffID: "s", Email: "user" + strconv.Itoa(i) + "@x.org", Name: "N"}
					if _, err := bus.Dispatch[string](ctx, bb, cmd); err != nil {
						b.Fatal(err)
					}
				}
			})
			b.Run("parallel", func(b *testing.B) {
				var next atomic.Int64
				b.SetParallelism(8)
				b.ReportAllocs()
				b.RunParallel(func(pb *testing.PB) {
					for pb.Next() {
						i := next.Add(1)
						cmd := &commands.CreateStaff{StaffID: "s", Email: "user" + strconv.FormatInt(i, 10) + "@x.org", Name: "N"}
						if _, err := bus.Dispatch[string](ctx, bb, cmd); err != nil {
							b.Error(err)
							return
						}
					}
				})
			})
		})
	}
}

// BenchmarkRunCreateStaff runs CreateStaff commands through a
// middleware.Runner, without and with the Uniqueness middleware, to show
// the middleware's own cost without a transport's noise.
func BenchmarkRunCreateStaff(b *testing.B) {
	handler := func(_ context.Context, p *middleware.Pipeline) (any, error) { return nil, nil }
	for _, with := range []bool{false, true} {
		name := "without"
		var mws []middleware.Middleware
		if with {
			name = "uniqueness"
			mws = append(mws, newUniqueness(b, uniqueness.Config{
				Locker: newMemory(b), Rules: []uniqueness.Rule{emailRule(newMemTable())},
			}))
		}
		r, err := middleware.NewRunner(middleware.RunnerConfig{Middleware: mws})
		require.NoError(b, err)
		ctx := context.Background()
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				i++
				cmd := &commands.CreateStaff{StaffID: "s", Email: "user" + strconv.Itoa(i) + "@x.org", Name: "N"}
				if _, err := r.Run(ctx, middleware.NewPipeline(ctx, cmd), handler); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkHooks is the Uniqueness middleware's own work for one command:
// BeforeDispatch (claim, lookup, watch) then AfterDispatch (release), on
// the memory store.
func BenchmarkHooks(b *testing.B) {
	mw := newUniqueness(b, uniqueness.Config{Locker: newMemory(b), Rules: []uniqueness.Rule{emailRule(newMemTable())}})
	ctx := context.Background()
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		i++
		p := middleware.NewPipeline(ctx, &commands.CreateStaff{StaffID: "s", Email: "user" + strconv.Itoa(i) + "@x.org", Name: "N"})
		mw.BeforeDispatch(ctx, p)
		if p.Halted() {
			b.Fatal(p.Err())
		}
		mw.AfterDispatch(ctx, p)
	}
}
