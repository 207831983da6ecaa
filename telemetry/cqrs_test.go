package telemetry_test

import (
	"context"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/components/cqrs"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"

	"github.com/claimbus/claimbus/middleware"
)

// A trace crosses a cqrs app: the sender's span goes into the message
// (OnSend through middleware.CQRSOnSend), and the span of the command run by the processor's
// OnHandle is its child.
func TestTraceCrossesCQRS(t *testing.T) {
	t.Parallel()
	sender, node := newNode(t), newNode(t)
	ps := newGoChannel(t)
	runner, err := middleware.NewRunner(middleware.RunnerConfig{Middleware: middlewares(node.tel)})
	require.NoError(t, err)
	handled := make(chan struct{}, 1)
	handler := cqrs.NewCommandHandler("create_user", func(context.Context, *CreateUser) error {
		handled <- struct{}{}
		return nil
	})
	onHandle, err := middleware.OnHandle(middleware.HandlerConfig{Runner: runner, Handlers: []cqrs.CommandHandler{handler}})
	require.NoError(t, err)
	router, err := message.NewRouter(message.RouterConfig{}, watermill.NopLogger{})
	require.NoError(t, err)
	proc, err := cqrs.NewCommandProcessorWithConfig(router, cqrs.CommandProcessorConfig{
		GenerateSubscribeTopic: func(cqrs.CommandProcessorGenerateSubscribeTopicParams) (string, error) { return "commands", nil },
		SubscriberConstructor:  func(cqrs.CommandProcessorSubscriberConstructorParams) (message.Subscriber, error) { return ps, nil },
		Marshaler:              cqrs.JSONMarshaler{},
		OnHandle:               onHandle,
	})
	require.NoError(t, err)
	require.NoError(t, proc.AddHandlers(handler))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- router.Run(ctx) }()
	t.Cleanup(func() { cancel(); require.NoError(t, <-done) })
	<-router.Running()

	cb, err := cqrs.NewCommandBusWithConfig(ps, cqrs.CommandBusConfig{
		GeneratePublishTopic: func(cqrs.CommandBusGeneratePublishTopicParams) (string, error) { return "commands", nil },
		Marshaler:            cqrs.JSONMarshaler{},
		OnSend:               middleware.CQRSOnSend(sender.tel.OnSend),
	})
	require.NoError(t, err)
	sctx, root := sender.tp.Tracer("test").Start(context.Background(), "POST /users")
	require.NoError(t, cb.Send(sctx, &CreateUser{ID: "u1", Email: "ada@example.com"}))
	root.End()
	select {
	case <-handled:
	case <-time.After(10 * time.Second):
		t.Fatal("the command was not handled")
	}
	require.Eventually(t, func() bool {
		return len(spansNamed(node.rec, "handle "+cqrs.JSONMarshaler{}.Name(&CreateUser{}))) == 1
	}, 10*time.Second, time.Millisecond, "the command's span ends after its after hooks")
	childOf(t, root.SpanContext(), spansNamed(node.rec, "handle "+cqrs.JSONMarshaler{}.Name(&CreateUser{}))[0])
}
