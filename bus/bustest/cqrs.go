package bustest

import (
	"context"
	"errors"
	"log/slog"
	"testing"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/components/cqrs"
	"github.com/ThreeDotsLabs/watermill/components/requestreply"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"
	"github.com/stretchr/testify/require"

	"github.com/claimbus/claimbus/claimstore"
	"github.com/claimbus/claimbus/lockstore"
	"github.com/claimbus/claimbus/middleware"
)

// CQRSOptions configure a test cqrs app (NewCQRS).
type CQRSOptions[R any] struct {
	// Middleware returns the pipeline's middleware, built on the stores,
	// as Options.Middleware. Default: none.
	Middleware func(s Stores) ([]middleware.Middleware, error)
	// Handlers returns the app's command handlers, made with rr as their
	// requestreply backend (requestreply.NewCommandHandlerWithResult) or
	// plain cqrs handlers. Required.
	Handlers func(rr *middleware.RequestReply[R]) []cqrs.CommandHandler
	// OnReset resets the app's own state (its read model, its tables);
	// Reset calls it after the stores. Default: none.
	OnReset func(ctx context.Context) error
	// Logger receives the pipeline's failure log. Default: the test's log
	// (t.Log), shown with -v or when the test fails.
	Logger *slog.Logger
}

// CQRS is an app's cqrs command processor under test: its handlers run
// with the pipeline in the processor's OnHandle, on memory stores and
// GoChannel, and Send answers as requestreply senders are answered.
type CQRS[R any] struct {
	Stores
	// CommandBus sends commands to the processor.
	CommandBus *cqrs.CommandBus
	// RequestReply is the backend of the handlers and of Send.
	RequestReply *middleware.RequestReply[R]
	claims       *resettableClaims
	mws          []middleware.Middleware
	onReset      func(ctx context.Context) error
}

// NewCQRS starts a router running a cqrs processor of opts.Handlers with
// the pipeline of opts.Middleware, on fresh memory stores, and stops it
// with t.Cleanup. It fails the test when the configuration, the
// middleware or the processor fails.
func NewCQRS[R any](t testing.TB, opts CQRSOptions[R]) *CQRS[R] {
	t.Helper()
	require.NotNil(t, opts.Handlers, "bustest: CQRSOptions.Handlers is required")
	logger := watermill.NopLogger{}
	commands := gochannel.NewGoChannel(gochannel.Config{}, logger)
	replies := gochannel.NewGoChannel(gochannel.Config{}, logger)
	t.Cleanup(func() { require.NoError(t, errors.Join(commands.Close(), replies.Close())) })
	locks, err := lockstore.NewMemory(lockstore.MemoryConfig{})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, locks.Close()) })
	claims := &resettableClaims{m: claimstore.NewMemory(claimstore.MemoryConfig{})}
	c := &CQRS[R]{Stores: Stores{Locks: locks, Claims: claims}, claims: claims, onReset: opts.OnReset}
	if opts.Middleware != nil {
		c.mws, err = opts.Middleware(c.Stores)
		require.NoError(t, err, "bustest: CQRSOptions.Middleware")
	}
	c.RequestReply, err = middleware.NewRequestReply[R](requestreply.PubSubBackendConfig{
		Publisher: replies,
		SubscriberConstructor: func(requestreply.PubSubBackendSubscribeParams) (message.Subscriber, error) {
			return replies, nil
		},
		GeneratePublishTopic:   func(requestreply.PubSubBackendPublishParams) (string, error) { return "replies", nil },
		GenerateSubscribeTopic: func(requestreply.PubSubBackendSubscribeParams) (string, error) { return "replies", nil },
	})
	require.NoError(t, err)
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.NewTextHandler(testWriter{t}, nil))
	}
	runner, err := middleware.NewRunner(middleware.RunnerConfig{Middleware: c.mws, FailureLog: middleware.FailureLog{Logger: log}})
	require.NoError(t, err)
	handlers := opts.Handlers(c.RequestReply)
	onHandle, err := middleware.OnHandle(c.RequestReply.HandlerConfig(runner, handlers...))
	require.NoError(t, err)

	router, err := message.NewRouter(message.RouterConfig{}, logger)
	require.NoError(t, err)
	proc, err := cqrs.NewCommandProcessorWithConfig(router, cqrs.CommandProcessorConfig{
		GenerateSubscribeTopic: func(cqrs.CommandProcessorGenerateSubscribeTopicParams) (string, error) { return "commands", nil },
		SubscriberConstructor: func(cqrs.CommandProcessorSubscriberConstructorParams) (message.Subscriber, error) {
			return commands, nil
		},
		Marshaler: cqrs.JSONMarshaler{},
		Logger:    logger,
		OnHandle:  onHandle,
	})
	require.NoError(t, err)
	require.NoError(t, proc.AddHandlers(handlers...))
	c.CommandBus, err = cqrs.NewCommandBusWithConfig(commands, cqrs.CommandBusConfig{
		GeneratePublishTopic: func(cqrs.CommandBusGeneratePublishTopicParams) (string, error) { return "commands", nil },
		Marshaler:            cqrs.JSONMarshaler{},
	})
	require.NoError(t, err)

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- router.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		require.NoError(t, <-done)
	})
	<-router.Running()
	return c
}

// Send sends cmd and waits for its reply, until ctx ends: the handler's
// result, or the command's error in reply.Error (a *middleware.Rejection
// for a rejection).
func (c *CQRS[R]) Send(ctx context.Context, cmd any) (requestreply.Reply[R], error) {
	return requestreply.SendWithReply[R](ctx, c.CommandBus, c.RequestReply, cmd)
}

// Reset makes the stores as new (see TestBus.Reset), then calls
// CQRSOptions.OnReset. Call it while no command runs.
func (c *CQRS[R]) Reset(ctx context.Context) error {
	err := resetStores(ctx, c.mws, c.Locks, c.claims)
	if c.onReset != nil {
		err = errors.Join(err, c.onReset(ctx))
	}
	return err
}

// testWriter writes to a test's log.
type testWriter struct{ t testing.TB }

func (w testWriter) Write(b []byte) (int, error) {
	w.t.Log(string(b))
	return len(b), nil
}
