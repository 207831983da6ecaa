package uniqueness_test

import (
	"context"
	"errors"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

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
	b.Cleanup(func() { require.NoError(b, ps.Close()) }) // after the bus's Close: cleanups run last first
	return startBusWith(b, bus.Config{Publisher: ps, Subscriber: ps, Middleware: mws},
		handler(func(_ context.Context, c *commands.CreateStaff) (string, error) { return c.StaffID, nil }))
}

// BenchmarkDispatchCreateStaff dispatches CreateStaff commands, each with
// its own email, over a GoChannel, to two buses in turn: one without
// middleware and one with the Uniqueness middleware (memory locker, lookup
// in a map). Timing the two alternately, call by call, keeps the noise of
// a shared machine out of the difference. Metrics: without-ns/op,
// uniqueness-ns/op, and overhead-ns/op, their difference.
func BenchmarkDispatchCreateStaff(b *testing.B) {
	plain := goChannelBus(b, nil)
	unique := goChannelBus(b, []middleware.Middleware{newUniqueness(b, uniqueness.Config{
		Locker: newMemory(b), Rules: []uniqueness.Rule{emailRule(newMemTable())},
	})})
	ctx := context.Background()
	var seq atomic.Int64
	// dispatch sends one command to bb and returns how long it took.
	dispatch := func(bb *bus.Bus) (time.Duration, error) {
		cmd := &commands.CreateStaff{StaffID: "s", Email: "user" + strconv.FormatInt(seq.Add(1), 10) + "@x.org", Name: "N"}
		start := time.Now()
		_, err := bus.Dispatch[string](ctx, bb, cmd)
		return time.Since(start), err
	}
	var without, with time.Duration
	n := 0
	for b.Loop() {
		d0, err0 := dispatch(plain)
		d1, err1 := dispatch(unique)
		if err := errors.Join(err0, err1); err != nil {
			b.Fatal(err)
		}
		without, with, n = without+d0, with+d1, n+1
	}
	b.ReportMetric(float64(without)/float64(n), "without-ns/op")
	b.ReportMetric(float64(with)/float64(n), "uniqueness-ns/op")
	b.ReportMetric(float64(with-without)/float64(n), "overhead-ns/op")
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
	benchHooks(b, newUniqueness(b, uniqueness.Config{Locker: newMemory(b), Rules: []uniqueness.Rule{emailRule(newMemTable())}}))
}

// benchHooks times mw's BeforeDispatch then AfterDispatch on CreateStaff
// commands, each with its own email.
func benchHooks(b *testing.B, mw *uniqueness.Middleware) {
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

// BenchmarkHooksValueTypeRule is BenchmarkHooks with other rules: "value",
// written for commands.CreateStaff, matches the *commands.CreateStaff
// commands by dereferencing them; "writeback" writes the normalised email
// back into the command.
func BenchmarkHooksValueTypeRule(b *testing.B) {
	table := newMemTable()
	for _, tt := range []struct {
		name string
		rule uniqueness.Rule
	}{
		{"value", uniqueness.Field(uniqueness.Names{Field: "email", Scope: "staff.email"},
			func(c commands.CreateStaff) string { return c.Email }, table.taken,
			uniqueness.Normalize(uniqueness.NormalizeEmail))},
		{"writeback", uniqueness.Field(uniqueness.Names{Field: "email", Scope: "staff.email"},
			func(c *commands.CreateStaff) string { return c.Email }, table.taken,
			uniqueness.Normalize(uniqueness.NormalizeEmail),
			uniqueness.WriteBack(func(c *commands.CreateStaff, v string) { c.Email = v }))},
	} {
		b.Run(tt.name, func(b *testing.B) {
			benchHooks(b, newUniqueness(b, uniqueness.Config{Locker: newMemory(b), Rules: []uniqueness.Rule{tt.rule}}))
		})
	}
}
