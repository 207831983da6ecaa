package bus_test

import (
	"context"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/components/cqrs"
	"github.com/ThreeDotsLabs/watermill/components/requestreply"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"
	"github.com/stretchr/testify/require"

	"github.com/claimbus/claimbus/bus"
	"github.com/claimbus/claimbus/middleware"
)

// BenchCmd is the command of the benchmarks, handled by a no-op handler.
type BenchCmd struct {
	ID   int
	Name string
}

type BenchResult struct{ OK bool }

// noopMiddleware is three middleware whose hooks do nothing.
func noopMiddleware() []middleware.Middleware {
	nop := func(context.Context, *middleware.Pipeline) {}
	m := middleware.Hooks{OnBeforeDispatch: nop, OnAfterDispatch: nop, OnAfterFailure: nop}
	return []middleware.Middleware{m, m, m}
}

func benchBus(b *testing.B, cfg bus.Config, handled *atomic.Int64) *bus.Bus {
	cfg.Middleware = noopMiddleware()
	return startBus(b, cfg, func(bb *bus.Bus) {
		require.NoError(b, bus.Handle(bb, func(_ context.Context, c *BenchCmd) (BenchResult, error) {
			if handled != nil {
				handled.Add(1)
			}
			return BenchResult{OK: true}, nil
		}))
	})
}

// watermillServices is Watermill's own request/reply over a GoChannel: a
// cqrs CommandBus and CommandProcessor, and a requestreply PubSubBackend.
type watermillServices struct {
	bus     *cqrs.CommandBus
	backend *requestreply.PubSubBackend[BenchResult]
}

func newWatermill(b *testing.B, withReply bool, handled *atomic.Int64) watermillServices {
	logger := watermill.NopLogger{}
	ps := gochannel.NewGoChannel(gochannel.Config{}, logger)
	marshaler := cqrs.JSONMarshaler{}
	backend, err := requestreply.NewPubSubBackend[BenchResult](requestreply.PubSubBackendConfig{
		Publisher: ps,
		SubscriberConstructor: func(requestreply.PubSubBackendSubscribeParams) (message.Subscriber, error) {
			return ps, nil
		},
		GenerateSubscribeTopic: func(requestreply.PubSubBackendSubscribeParams) (string, error) { return "reply", nil },
		GeneratePublishTopic:   func(requestreply.PubSubBackendPublishParams) (string, error) { return "reply", nil },
		Logger:                 logger,
		AckCommandErrors:       true,
	}, requestreply.BackendPubsubJSONMarshaler[BenchResult]{})
	require.NoError(b, err)

	router, err := message.NewRouter(message.RouterConfig{}, logger)
	require.NoError(b, err)
	commandBus, err := cqrs.NewCommandBusWithConfig(ps, cqrs.CommandBusConfig{
		GeneratePublishTopic: func(p cqrs.CommandBusGeneratePublishTopicParams) (string, error) { return "commands", nil },
		Marshaler:            marshaler,
		Logger:               logger,
	})
	require.NoError(b, err)
	processor, err := cqrs.NewCommandProcessorWithConfig(router, cqrs.CommandProcessorConfig{
		GenerateSubscribeTopic: func(cqrs.CommandProcessorGenerateSubscribeTopicParams) (string, error) { return "commands", nil },
		SubscriberConstructor: func(cqrs.CommandProcessorSubscriberConstructorParams) (message.Subscriber, error) {
			return ps, nil
		},
		Marshaler: marshaler,
		Logger:    logger,
	})
	require.NoError(b, err)
	handle := func(_ context.Context, c *BenchCmd) (BenchResult, error) {
		if handled != nil {
			handled.Add(1)
		}
		return BenchResult{OK: true}, nil
	}
	if withReply {
		require.NoError(b, processor.AddHandlers(requestreply.NewCommandHandlerWithResult("bench", backend, handle)))
	} else {
		require.NoError(b, processor.AddHandlers(cqrs.NewCommandHandler("bench", func(ctx context.Context, c *BenchCmd) error {
			_, err := handle(ctx, c)
			return err
		})))
	}
	runErr := make(chan error, 1)
	go func() { runErr <- router.Run(context.Background()) }()
	<-router.Running()
	b.Cleanup(func() {
		require.NoError(b, router.Close())
		require.NoError(b, <-runErr)
		require.NoError(b, ps.Close())
	})
	return watermillServices{bus: commandBus, backend: backend}
}

// BenchmarkDispatch compares a Dispatch through three no-op middleware with
// Watermill's requestreply.SendWithReply, both over a GoChannel and with
// the same no-op handler.
func BenchmarkDispatch(b *testing.B) {
	ctx := context.Background()
	cmd := &BenchCmd{ID: 7, Name: "bench"}
	b.Run("impl=claimbus", func(b *testing.B) {
		bb := benchBus(b, bus.Config{}, nil)
		b.ReportAllocs()
		for b.Loop() {
			if _, err := bus.Dispatch[BenchResult](ctx, bb, cmd); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("impl=claimbus-gochannel-transport", func(b *testing.B) {
		ps := newGoChannel(b)
		bb := benchBus(b, bus.Config{Publisher: ps, Subscriber: ps}, nil)
		b.ReportAllocs()
		for b.Loop() {
			if _, err := bus.Dispatch[BenchResult](ctx, bb, cmd); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("impl=watermill-requestreply", func(b *testing.B) {
		w := newWatermill(b, true, nil)
		b.ReportAllocs()
		for b.Loop() {
			reply, err := requestreply.SendWithReply[BenchResult](ctx, w.bus, w.backend, cmd)
			if err != nil || reply.Error != nil {
				b.Fatal(err, reply.Error)
			}
		}
	})
}

// BenchmarkSend measures Send throughput: b.N commands sent and every one
// handled, against cqrs.CommandBus.Send with the same no-op handler. The
// timer runs until the last command is handled: a Send that only queues
// its command must not look fast.
func BenchmarkSend(b *testing.B) {
	ctx := context.Background()
	cmd := &BenchCmd{ID: 7, Name: "bench"}
	b.Run("impl=claimbus", func(b *testing.B) {
		var handled atomic.Int64
		bb := benchBus(b, bus.Config{}, &handled)
		b.ReportAllocs()
		b.ResetTimer()
		for range b.N {
			if err := bb.Send(ctx, cmd); err != nil {
				b.Fatal(err)
			}
		}
		waitHandled(b, &handled, b.N)
	})
	b.Run("impl=watermill-cqrs", func(b *testing.B) {
		var handled atomic.Int64
		w := newWatermill(b, false, &handled)
		b.ReportAllocs()
		b.ResetTimer()
		for range b.N {
			if err := w.bus.Send(ctx, cmd); err != nil {
				b.Fatal(err)
			}
		}
		waitHandled(b, &handled, b.N)
	})
}

// waitHandled waits, inside the timed region, until n commands were
// handled.
func waitHandled(b *testing.B, handled *atomic.Int64, n int) {
	deadline := time.Now().Add(time.Minute)
	for handled.Load() < int64(n) {
		if time.Now().After(deadline) {
			b.Fatalf("%d of %d commands handled", handled.Load(), n)
		}
		runtime.Gosched()
	}
	b.StopTimer()
}
