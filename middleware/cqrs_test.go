package middleware_test

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/components/cqrs"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"

	"github.com/claimbus/claimbus/middleware"
)

// cqrsEnv is a cqrs processor on a running router.
type cqrsEnv struct {
	pubSub     message.Publisher
	deliveries *deliveries
}

// startCQRS runs handler in a processor on a new router; onHandle, when
// set, is the processor's OnHandle.
func startCQRS(t *testing.T, handler cqrs.CommandHandler, onHandle cqrs.CommandProcessorOnHandleFn) *cqrsEnv {
	t.Helper()
	ps := newPubSub(t)
	env := &cqrsEnv{pubSub: ps, deliveries: newDeliveries()}
	router := newRouter(t, env.deliveries)
	proc, err := cqrs.NewCommandProcessorWithConfig(router, cqrs.CommandProcessorConfig{
		GenerateSubscribeTopic: func(cqrs.CommandProcessorGenerateSubscribeTopicParams) (string, error) { return "commands", nil },
		SubscriberConstructor: func(cqrs.CommandProcessorSubscriberConstructorParams) (message.Subscriber, error) {
			return ps, nil
		},
		OnHandle:  onHandle,
		Marshaler: cqrs.JSONMarshaler{},
		Logger:    watermill.NopLogger{},
	})
	require.NoError(t, err)
	require.NoError(t, proc.AddHandlers(handler))
	runRouter(t, router)
	return env
}

func TestOnHandle(t *testing.T) {
	t.Parallel()
	rec := &recorder{}
	res := &results{}
	runner := newRunner(t, middleware.Validate(), takenEmails, middleware.Hooks{
		OnBeforeDispatch: func(_ context.Context, p *middleware.Pipeline) {
			// A context not derived from the message's.
			p.SetContext(context.WithValue(context.Background(), ctxKey("tx"), "tx-1"))
		},
	})
	var calls atomic.Int64
	handler := cqrs.NewCommandHandler("create_staff", func(ctx context.Context, cmd *CreateStaff) error {
		orig := cqrs.OriginalMessageFromCtx(ctx)
		p, _ := middleware.PipelineFromContext(ctx)
		rec.add("handled %s original=%v pipeline=%v tx=%v", cmd.Email, orig != nil && orig.UUID == p.CommandUUID,
			p.CommandName, ctx.Value(ctxKey("tx")))
		if cmd.Email == "broken@x.org" && calls.Add(1) == 1 {
			return errHandler
		}
		return nil
	})
	onHandle, err := middleware.OnHandle(middleware.HandlerConfig{Runner: runner, OnResult: res.fn, Handlers: []cqrs.CommandHandler{handler}})
	require.NoError(t, err)
	env := startCQRS(t, handler, onHandle)

	ok := commandMessage(t, &CreateStaff{Email: "ann@x.org"})
	publishAcked(t, env.pubSub, "commands", ok)
	taken := commandMessage(t, &CreateStaff{Email: "taken@x.org"})
	publishAcked(t, env.pubSub, "commands", taken)
	invalid := commandMessage(t, &CreateStaff{Email: "nobody"})
	publishAcked(t, env.pubSub, "commands", invalid)
	broken := commandMessage(t, &CreateStaff{Email: "broken@x.org"})
	publishAcked(t, env.pubSub, "commands", broken)

	require.Equal(t, []string{
		"handled ann@x.org original=true pipeline=middleware_test.CreateStaff tx=tx-1",
		"handled broken@x.org original=true pipeline=middleware_test.CreateStaff tx=tx-1",
		"handled broken@x.org original=true pipeline=middleware_test.CreateStaff tx=tx-1",
	}, rec.list())
	require.Equal(t, 1, env.deliveries.count(ok.UUID))
	require.Equal(t, 1, env.deliveries.count(taken.UUID), "a halted command is acked")
	require.Equal(t, 1, env.deliveries.count(invalid.UUID), "a halted command is acked")
	require.Equal(t, 2, env.deliveries.count(broken.UUID), "a handler error is nacked")

	got := res.list()
	require.Len(t, got, 5)
	require.NoError(t, got[0].err)
	require.ErrorIs(t, got[1].err, middleware.ErrAlreadyTaken)
	require.ErrorIs(t, got[2].err, middleware.ErrInvalid)
	require.ErrorIs(t, got[3].err, errHandler)
	require.NoError(t, got[4].err)
}

func TestHandlerConfigValidate(t *testing.T) {
	t.Parallel()
	require.ErrorContains(t, middleware.HandlerConfig{}.Validate(), "Runner is nil")
	_, err := middleware.OnHandle(middleware.HandlerConfig{})
	require.Error(t, err)
	require.NoError(t, middleware.HandlerConfig{Runner: newRunner(t)}.Validate())
}

// CQRSOnSend calls each function in order with the message's context and
// the message.
func TestCQRSOnSend(t *testing.T) {
	t.Parallel()
	type key struct{}
	msg := message.NewMessage("m1", nil)
	msg.SetContext(context.WithValue(context.Background(), key{}, "v"))
	var calls []string
	mark := func(name string) func(context.Context, *message.Message) {
		return func(ctx context.Context, m *message.Message) {
			require.Same(t, msg, m)
			calls = append(calls, name+"="+ctx.Value(key{}).(string))
		}
	}
	onSend := middleware.CQRSOnSend(mark("a"), mark("b"))
	require.NoError(t, onSend(cqrs.CommandBusOnSendParams{Message: msg}))
	require.Equal(t, []string{"a=v", "b=v"}, calls)
}
