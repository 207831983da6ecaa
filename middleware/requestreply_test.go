package middleware_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/components/cqrs"
	"github.com/ThreeDotsLabs/watermill/components/requestreply"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"
	"github.com/stretchr/testify/require"

	"github.com/claimbus/claimbus/middleware"
)

// takenEmails halts CreateStaff for "taken@x.org" as a uniqueness
// middleware would.
var takenEmails = middleware.Hooks{OnBeforeDispatch: func(_ context.Context, p *middleware.Pipeline) {
	if cmd, ok := p.Command.(*CreateStaff); ok && cmd.Email == "taken@x.org" {
		p.Halt(middleware.Reject(middleware.CodeAlreadyTaken, "email", "%s is already taken", cmd.Email))
	}
}}

// createStaff is the handler behind the requestreply tests.
func createStaff(_ context.Context, cmd *CreateStaff) (StaffCreated, error) {
	switch cmd.Email {
	case "refused@x.org":
		return StaffCreated{}, fmt.Errorf("policy: %w", middleware.Reject(middleware.CodeInvalid, "email", "domain refused"))
	case "broken@x.org":
		return StaffCreated{}, errors.New("database down")
	case "panic@x.org":
		panic("handler boom")
	}
	return StaffCreated{ID: "staff:" + cmd.Email}, nil
}

// modifyingBus is a requestreply.CommandBus that also applies modify to
// every message it sends.
type modifyingBus struct {
	bus    *cqrs.CommandBus
	modify func(*message.Message)
}

func (b modifyingBus) SendWithModifiedMessage(ctx context.Context, cmd any, modify func(*message.Message) error) error {
	return b.bus.SendWithModifiedMessage(ctx, cmd, func(m *message.Message) error {
		if err := modify(m); err != nil {
			return err
		}
		b.modify(m)
		return nil
	})
}

// requestReplyEnv is a router answering requestreply senders, with the
// pipeline plugged in one of the three ways.
type requestReplyEnv struct {
	bus        *cqrs.CommandBus
	backend    *middleware.RequestReply[StaffCreated]
	deliveries *deliveries
}

func startRequestReplyEnv(t *testing.T, plug string) *requestReplyEnv {
	t.Helper()
	// Commands go through a GoChannel whose Publish returns once the
	// command is acked; replies through another one that does not block
	// (a blocking Publish holds the GoChannel's lock until the ack, which a
	// reply published on the same GoChannel would wait for).
	ps := newPubSub(t)
	replies := gochannel.NewGoChannel(gochannel.Config{}, watermill.NopLogger{})
	t.Cleanup(func() { require.NoError(t, replies.Close()) })
	env := &requestReplyEnv{deliveries: newDeliveries()}
	rr, err := middleware.NewRequestReply[StaffCreated](replyBackendConfig(replies))
	require.NoError(t, err)
	env.backend = rr

	runner := newRunner(t, middleware.Validate(), takenEmails)
	handler := requestreply.NewCommandHandlerWithResult("create_staff", env.backend, createStaff)
	router := newRouter(t, env.deliveries)
	procCfg := cqrs.CommandProcessorConfig{
		GenerateSubscribeTopic: func(cqrs.CommandProcessorGenerateSubscribeTopicParams) (string, error) { return "commands", nil },
		SubscriberConstructor: func(cqrs.CommandProcessorSubscriberConstructorParams) (message.Subscriber, error) {
			return ps, nil
		},
		Marshaler: cqrs.JSONMarshaler{},
		Logger:    watermill.NopLogger{},
	}
	hcfg := rr.HandlerConfig(runner, handler)
	switch plug {
	case "router":
		mw, err := middleware.RouterMiddleware(middleware.RouterConfig{Runner: runner, Registry: newRegistry(t),
			OnResult: hcfg.OnResult, AckHandlerErrors: true, Logger: discardLogger})
		require.NoError(t, err)
		router.AddMiddleware(mw)
	case "onhandle":
		procCfg.OnHandle, err = middleware.OnHandle(hcfg)
		require.NoError(t, err)
	}
	proc, err := cqrs.NewCommandProcessorWithConfig(router, procCfg)
	require.NoError(t, err)
	require.NoError(t, proc.AddHandlers(handler))
	runRouter(t, router)

	env.bus, err = cqrs.NewCommandBusWithConfig(ps, cqrs.CommandBusConfig{
		GeneratePublishTopic: func(cqrs.CommandBusGeneratePublishTopicParams) (string, error) { return "commands", nil },
		Marshaler:            cqrs.JSONMarshaler{},
	})
	require.NoError(t, err)
	return env
}

// send sends cmd with requestreply.SendWithReply and fails the test if no
// reply comes in time. modify, when set, changes the command message.
func (env *requestReplyEnv) send(t *testing.T, cmd *CreateStaff, modify func(*message.Message)) (requestreply.Reply[StaffCreated], string) {
	t.Helper()
	var uuid string
	bus := modifyingBus{bus: env.bus, modify: func(m *message.Message) {
		uuid = m.UUID
		if modify != nil {
			modify(m)
		}
	}}
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	reply, err := requestreply.SendWithReply[StaffCreated](ctx, bus, env.backend, cmd)
	require.NoError(t, err, "the sender must get an answer, not hang")
	return reply, uuid
}

func TestRequestReplyRoundTrip(t *testing.T) {
	t.Parallel()
	for _, plug := range []string{"router", "onhandle"} {
		t.Run(plug, func(t *testing.T) {
			t.Parallel()
			env := startRequestReplyEnv(t, plug)
			tests := []struct {
				name   string
				email  string
				modify func(*message.Message)
				// routerOnly: the cqrs processor itself nacks an
				// undecodable message before OnHandle or a wrapped handler.
				routerOnly bool
				check      func(t *testing.T, reply requestreply.Reply[StaffCreated])
			}{
				{
					name:  "handled",
					email: "ann@x.org",
					check: func(t *testing.T, reply requestreply.Reply[StaffCreated]) {
						require.NoError(t, reply.Error)
						require.Equal(t, StaffCreated{ID: "staff:ann@x.org"}, reply.HandlerResult)
					},
				},
				{
					name:  "halted by a uniqueness-like middleware",
					email: "taken@x.org",
					check: func(t *testing.T, reply requestreply.Reply[StaffCreated]) {
						require.ErrorIs(t, reply.Error, middleware.ErrAlreadyTaken)
						var rej *middleware.Rejection
						require.ErrorAs(t, reply.Error, &rej)
						require.Equal(t, &middleware.Rejection{
							Code: middleware.CodeAlreadyTaken, Field: "email", Message: "taken@x.org is already taken",
						}, rej)
						require.Zero(t, reply.HandlerResult)
					},
				},
				{
					name:  "halted by Validate",
					email: "not-an-email",
					check: func(t *testing.T, reply requestreply.Reply[StaffCreated]) {
						require.ErrorIs(t, reply.Error, middleware.ErrInvalid)
						var rej *middleware.Rejection
						require.ErrorAs(t, reply.Error, &rej)
						require.Equal(t, "email", rej.Field)
					},
				},
				{
					name:  "rejected by the handler",
					email: "refused@x.org",
					check: func(t *testing.T, reply requestreply.Reply[StaffCreated]) {
						require.ErrorIs(t, reply.Error, middleware.ErrInvalid)
						var rej *middleware.Rejection
						require.ErrorAs(t, reply.Error, &rej)
						require.Equal(t, "email", rej.Field)
						require.Equal(t, "domain refused", rej.Message)
					},
				},
				{
					name:  "handler error",
					email: "broken@x.org",
					check: func(t *testing.T, reply requestreply.Reply[StaffCreated]) {
						var rerr *middleware.RemoteError
						require.ErrorAs(t, reply.Error, &rerr)
						require.Equal(t, "database down", rerr.Message)
					},
				},
				{
					name:  "handler panic",
					email: "panic@x.org",
					check: func(t *testing.T, reply requestreply.Reply[StaffCreated]) {
						var rerr *middleware.RemoteError
						require.ErrorAs(t, reply.Error, &rerr)
						require.Contains(t, rerr.Message, "handler boom")
					},
				},
				{
					name:       "undecodable payload",
					email:      "ann@x.org",
					modify:     func(m *message.Message) { m.Payload = []byte(`{"email": 42}`) },
					routerOnly: true,
					check: func(t *testing.T, reply requestreply.Reply[StaffCreated]) {
						require.ErrorIs(t, reply.Error, middleware.ErrInvalid)
						require.ErrorContains(t, reply.Error, "undecodable")
					},
				},
			}
			for _, tt := range tests {
				if tt.routerOnly && plug != "router" {
					continue
				}
				t.Run(tt.name, func(t *testing.T) {
					reply, uuid := env.send(t, &CreateStaff{Email: tt.email}, tt.modify)
					tt.check(t, reply)
					// The command was acked once answered: the GoChannel
					// publish returned, so no redelivery can follow.
					require.Equal(t, 1, env.deliveries.count(uuid))
				})
			}
		})
	}
}

// TestRequestReplyConcurrent sends many commands at once, half of them
// halted: every sender gets its own answer.
func TestRequestReplyConcurrent(t *testing.T) {
	t.Parallel()
	env := startRequestReplyEnv(t, "router")
	const senders = 24
	var wg sync.WaitGroup
	errs := make(chan error, senders)
	for i := range senders {
		wg.Go(func() {
			email := fmt.Sprintf("user%d@x.org", i)
			if i%2 == 0 {
				email = "taken@x.org"
			}
			ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
			defer cancel()
			reply, err := requestreply.SendWithReply[StaffCreated](ctx, env.bus, env.backend, &CreateStaff{Email: email})
			switch {
			case err != nil:
				errs <- err
			case i%2 == 0 && !errors.Is(reply.Error, middleware.ErrAlreadyTaken):
				errs <- fmt.Errorf("sender %d: got %w, want already_taken", i, reply.Error)
			case i%2 == 1 && (reply.Error != nil || reply.HandlerResult.ID != "staff:"+email):
				errs <- fmt.Errorf("sender %d: got %+v, %w", i, reply.HandlerResult, reply.Error)
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
}

func TestReplyMarshaler(t *testing.T) {
	t.Parallel()
	m := middleware.ReplyMarshaler[StaffCreated]{}
	tests := []struct {
		name  string
		err   error
		check func(t *testing.T, got error)
	}{
		{name: "no error", check: func(t *testing.T, got error) { require.NoError(t, got) }},
		{
			name: "wrapped rejection",
			err:  fmt.Errorf("claim: %w", middleware.Reject(middleware.CodeLocked, "", "transfer/7 is locked")),
			check: func(t *testing.T, got error) {
				require.ErrorIs(t, got, middleware.ErrLocked)
				require.Equal(t, &middleware.Rejection{Code: middleware.CodeLocked, Message: "transfer/7 is locked"}, got)
			},
		},
		{
			name: "plain error",
			err:  errors.New("disk full"),
			check: func(t *testing.T, got error) {
				require.Equal(t, &middleware.RemoteError{Message: "disk full"}, got)
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			msg, err := m.MarshalReply(requestreply.BackendOnCommandProcessedParams[StaffCreated]{
				HandlerResult: StaffCreated{ID: "s1"}, HandleErr: tt.err,
			})
			require.NoError(t, err)
			// Watermill's own marshaler still reads the error's message.
			plain, err := requestreply.BackendPubsubJSONMarshaler[StaffCreated]{}.UnmarshalReply(msg)
			require.NoError(t, err)
			if tt.err != nil {
				require.EqualError(t, plain.Error, tt.err.Error())
			}
			reply, err := m.UnmarshalReply(msg)
			require.NoError(t, err)
			require.Equal(t, StaffCreated{ID: "s1"}, reply.HandlerResult)
			tt.check(t, reply.Error)
		})
	}

	t.Run("a reply from Watermill's marshaler", func(t *testing.T) {
		t.Parallel()
		msg, err := requestreply.BackendPubsubJSONMarshaler[StaffCreated]{}.MarshalReply(
			requestreply.BackendOnCommandProcessedParams[StaffCreated]{HandleErr: errors.New("old node")})
		require.NoError(t, err)
		reply, err := m.UnmarshalReply(msg)
		require.NoError(t, err)
		require.Equal(t, &middleware.RemoteError{Message: "old node"}, reply.Error)
	})
	t.Run("an undecodable result", func(t *testing.T) {
		t.Parallel()
		_, err := m.UnmarshalReply(message.NewMessage("r1", []byte("{")))
		require.ErrorContains(t, err, "cannot unmarshal reply result")
	})
}

// replyBackendConfig is the requestreply backend config of replies on
// ps's topic "replies".
func replyBackendConfig(ps *gochannel.GoChannel) requestreply.PubSubBackendConfig {
	return requestreply.PubSubBackendConfig{
		Publisher: ps,
		SubscriberConstructor: func(requestreply.PubSubBackendSubscribeParams) (message.Subscriber, error) {
			return ps, nil
		},
		GeneratePublishTopic:   func(requestreply.PubSubBackendPublishParams) (string, error) { return "replies", nil },
		GenerateSubscribeTopic: func(requestreply.PubSubBackendSubscribeParams) (string, error) { return "replies", nil },
	}
}

// Answering requestreply senders without acking handler errors is caught
// when the adapter is built, in each of the three plugs; NewRequestReply's
// configs pass.
func TestIncompleteRequestReplyIsRefused(t *testing.T) {
	t.Parallel()
	replies := gochannel.NewGoChannel(gochannel.Config{}, watermill.NopLogger{})
	t.Cleanup(func() { require.NoError(t, replies.Close()) })
	rr, err := middleware.NewRequestReply[StaffCreated](replyBackendConfig(replies))
	require.NoError(t, err)
	runner := newRunner(t)
	handler := requestreply.NewCommandHandlerWithResult("create_staff", rr, createStaff)

	bare := rr.HandlerConfig(runner, handler)
	bare.AckHandlerErrors = false
	_, err = middleware.OnHandle(bare)
	require.ErrorContains(t, err, "incomplete requestreply set-up")
	_, err = middleware.RouterMiddleware(middleware.RouterConfig{Runner: runner, Registry: newRegistry(t), OnResult: bare.OnResult})
	require.ErrorContains(t, err, "incomplete requestreply set-up")
	require.ErrorContains(t, err, "RequestReply.HandlerConfig")

	_, err = middleware.OnHandle(rr.HandlerConfig(runner, handler))
	require.NoError(t, err)
	_, err = middleware.RouterMiddleware(middleware.RouterConfig{Runner: runner, Registry: newRegistry(t), OnResult: bare.OnResult, AckHandlerErrors: true})
	require.NoError(t, err)
	other := middleware.HandlerConfig{Runner: runner, Handlers: []cqrs.CommandHandler{handler},
		OnResult: func(context.Context, *message.Message, any, error) error { return nil }}
	_, err = middleware.OnHandle(other)
	require.NoError(t, err, "any other ResultFunc may nack")

	// The one call builds the Runner and checks it as OnHandle does.
	_, err = rr.OnHandle([]cqrs.CommandHandler{handler}, middleware.Validate(), takenEmails)
	require.NoError(t, err)
	_, err = rr.OnHandle(nil, middleware.Validate())
	require.ErrorContains(t, err, "Handlers is empty")
	_, err = rr.OnHandle([]cqrs.CommandHandler{handler}, nil)
	require.ErrorContains(t, err, "Middleware[0] is nil")
}
