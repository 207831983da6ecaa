package middleware_test

import (
	"context"
	"testing"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/claimbus/claimbus/lockstore"
	"github.com/claimbus/claimbus/middleware"
)

func noopHandler(context.Context, *middleware.Pipeline) (any, error) { return nil, nil }

// BenchmarkRunnerThreeNoop is the runner's own cost: three no-op
// middleware around a no-op handler.
func BenchmarkRunnerThreeNoop(b *testing.B) {
	noop := middleware.Hooks{}
	r, err := middleware.NewRunner(middleware.RunnerConfig{Middleware: []middleware.Middleware{noop, noop, noop}})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	cmd := &CreateStaff{Email: "ann@x.org"}
	b.ReportAllocs()
	for b.Loop() {
		p := middleware.NewPipeline(ctx, cmd)
		if _, err := r.Run(ctx, p, noopHandler); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkRouterMiddleware is the cost the router adapter adds to a
// message: decoding, the pipeline, three no-op middleware.
func BenchmarkRouterMiddleware(b *testing.B) {
	noop := middleware.Hooks{}
	r, err := middleware.NewRunner(middleware.RunnerConfig{Middleware: []middleware.Middleware{noop, noop, noop}})
	if err != nil {
		b.Fatal(err)
	}
	reg := middleware.NewRegistry(nil)
	if _, err := middleware.Register[CreateStaff](reg); err != nil {
		b.Fatal(err)
	}
	mw, err := middleware.RouterMiddleware(middleware.RouterConfig{Runner: r, Registry: reg})
	if err != nil {
		b.Fatal(err)
	}
	h := mw(func(*message.Message) ([]*message.Message, error) { return nil, nil })
	msg := message.NewMessage("cmd-1", []byte(`{"email":"ann@x.org"}`))
	msg.Metadata.Set("name", createStaffName)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := h(msg); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkLockMiddleware is an uncontended lock and release around a
// no-op handler on the memory store.
func BenchmarkLockMiddleware(b *testing.B) {
	store, err := lockstore.NewMemory(lockstore.MemoryConfig{})
	if err != nil {
		b.Fatal(err)
	}
	defer store.Close()
	lock, err := middleware.Lock(middleware.LockConfig{Locker: store, Keys: transferKeys, Logger: discardLogger})
	if err != nil {
		b.Fatal(err)
	}
	r, err := middleware.NewRunner(middleware.RunnerConfig{Middleware: []middleware.Middleware{lock}})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	cmd := &Transfer{ID: "t1"}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := r.Run(ctx, middleware.NewPipeline(ctx, cmd), noopHandler); err != nil {
			b.Fatal(err)
		}
	}
}
