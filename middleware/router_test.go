package middleware_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/claimbus/claimbus/internal/wire"

	"github.com/ThreeDotsLabs/watermill/message"
	wmiddleware "github.com/ThreeDotsLabs/watermill/message/router/middleware"
	"github.com/stretchr/testify/require"

	"github.com/claimbus/claimbus/middleware"
)

// routerEnv is a running router whose handler on "commands" runs the
// pipeline (RouterMiddleware) around handle.
type routerEnv struct {
	pubSub     message.Publisher
	deliveries *deliveries
	results    *results
	handled    atomic.Int64
	handle     func(msg *message.Message) error
}

func startRouterEnv(t *testing.T, cfg middleware.RouterConfig, res *results, outer ...message.HandlerMiddleware) *routerEnv {
	t.Helper()
	ps := newPubSub(t)
	if res == nil {
		res = &results{}
	}
	env := &routerEnv{pubSub: ps, deliveries: newDeliveries(), results: res}
	if cfg.Registry == nil {
		cfg.Registry = newRegistry(t)
	}
	if cfg.OnResult == nil {
		cfg.OnResult = env.results.fn
	}
	cfg.Logger = discardLogger
	mw, err := middleware.RouterMiddleware(cfg)
	require.NoError(t, err)
	r := newRouter(t, env.deliveries)
	r.AddMiddleware(outer...)
	r.AddMiddleware(mw)
	r.AddConsumerHandler("create_staff", "commands", ps, func(msg *message.Message) error {
		env.handled.Add(1)
		if env.handle != nil {
			return env.handle(msg)
		}
		return nil
	})
	runRouter(t, r)
	return env
}

func TestRouterMiddlewareRunsPipelineAroundHandler(t *testing.T) {
	t.Parallel()
	rec := &recorder{}
	runner := newRunner(t, &recMW{name: "m1", rec: rec}, middleware.Hooks{
		OnBeforeDispatch: func(_ context.Context, p *middleware.Pipeline) {
			rec.add("decoded %T %s name=%s corr=%s cause=%s", p.Command, p.Command.(*CreateStaff).Email,
				p.CommandName, p.CorrelationID, p.CausationID)
			p.SetContext(context.WithValue(p.Context(), ctxKey("claim"), "claim-1"))
		},
	})
	env := startRouterEnv(t, middleware.RouterConfig{Runner: runner}, nil)
	env.handle = func(msg *message.Message) error {
		p, ok := middleware.PipelineFromContext(msg.Context())
		ids, _ := middleware.IDsFromContext(msg.Context())
		rec.add("handler pipeline=%v claim=%v ids=%+v", ok && p.CommandUUID == msg.UUID,
			msg.Context().Value(ctxKey("claim")), ids)
		return nil
	}

	msg := commandMessage(t, &CreateStaff{Email: "ann@x.org"})
	msg.UUID = "cmd-1"
	msg.Metadata.Set(wire.MetadataCorrelationID, "corr-1")
	msg.Metadata.Set(wire.MetadataCausationID, "cause-1")
	publishAcked(t, env.pubSub, "commands", msg)

	require.Equal(t, []string{
		"m1.before",
		"decoded *middleware_test.CreateStaff ann@x.org name=middleware_test.CreateStaff corr=corr-1 cause=cause-1",
		"handler pipeline=true claim=claim-1 ids={CorrelationID:corr-1 CausationID:cmd-1}",
		"m1.afterDispatch",
	}, rec.list())
	require.Equal(t, 1, env.deliveries.count("cmd-1"))
	got := env.results.list()
	require.Len(t, got, 1)
	require.Equal(t, "cmd-1", got[0].uuid)
	require.NoError(t, got[0].err)
	require.True(t, got[0].pipeline)
	require.True(t, got[0].handled)
	require.True(t, got[0].ctxAlive, "the ResultFunc's context outlives the message's")
	require.True(t, got[0].hasCancel, "the ResultFunc's context has a deadline")
}

func TestRouterMiddlewareOutcomes(t *testing.T) {
	t.Parallel()
	halting := middleware.Hooks{OnBeforeDispatch: func(_ context.Context, p *middleware.Pipeline) {
		if p.Command.(*CreateStaff).Email == "taken@x.org" {
			p.Halt(middleware.Reject(middleware.CodeAlreadyTaken, "email", "taken@x.org is taken"))
		}
	}}
	failOnce := func(env *routerEnv) func(*message.Message) error {
		var calls atomic.Int64
		return func(*message.Message) error {
			if calls.Add(1) == 1 {
				return errHandler
			}
			return nil
		}
	}

	tests := []struct {
		name string
		cfg  middleware.RouterConfig
		// handle, when set, makes the handler.
		handle func(env *routerEnv) func(*message.Message) error
		msg    func(t *testing.T) *message.Message
		// failResults is how many first calls of the ResultFunc fail.
		failResults int
		// poison, when set, is the topic of a PoisonQueue outside.
		poison chan *message.Message
		// deliveries is how many times the router got the message, results
		// how many times the ResultFunc was called.
		deliveries, results int
		check               func(t *testing.T, env *routerEnv, got []result)
	}{
		{
			name: "undecodable payload is rejected as invalid, acked, answered, delivered once",
			msg: func(t *testing.T) *message.Message {
				msg := commandMessage(t, &CreateStaff{Email: "ann@x.org"})
				msg.Payload = []byte("{not json")
				return msg
			},
			deliveries: 1,
			results:    1,
			check: func(t *testing.T, env *routerEnv, got []result) {
				require.Zero(t, env.handled.Load())
				require.ErrorIs(t, got[0].err, middleware.ErrInvalid)
				require.ErrorIs(t, got[0].err, middleware.ErrUndecodable)
				require.ErrorContains(t, got[0].err, createStaffName)
				require.False(t, got[0].pipeline, "an undecodable message never had a run")
			},
		},
		{
			name:   "undecodable payload goes to a poison queue when asked",
			cfg:    middleware.RouterConfig{ReturnDecodeErrors: true},
			poison: make(chan *message.Message, 1),
			msg: func(t *testing.T) *message.Message {
				msg := commandMessage(t, &CreateStaff{})
				msg.Payload = []byte("[]")
				return msg
			},
			deliveries: 1,
			results:    0,
			check: func(t *testing.T, env *routerEnv, got []result) {
				require.Zero(t, env.handled.Load())
			},
		},
		{
			name: "unknown command name passes through untouched",
			msg: func(t *testing.T) *message.Message {
				msg := commandMessage(t, &CreateStaff{Email: "ann@x.org"})
				msg.Metadata.Set("name", "billing.Refund")
				return msg
			},
			handle: func(*routerEnv) func(*message.Message) error {
				return func(msg *message.Message) error {
					if _, ok := middleware.PipelineFromContext(msg.Context()); ok {
						return errors.New("an unknown command ran through the pipeline")
					}
					return nil
				}
			},
			deliveries: 1,
			results:    0,
			check: func(t *testing.T, env *routerEnv, got []result) {
				require.EqualValues(t, 1, env.handled.Load())
			},
		},
		{
			name: "unknown command name is rejected when asked",
			cfg:  middleware.RouterConfig{RejectUnknown: true},
			msg: func(t *testing.T) *message.Message {
				msg := commandMessage(t, &CreateStaff{Email: "ann@x.org"})
				msg.Metadata.Set("name", "billing.Refund")
				return msg
			},
			deliveries: 1,
			results:    1,
			check: func(t *testing.T, env *routerEnv, got []result) {
				require.Zero(t, env.handled.Load())
				require.ErrorIs(t, got[0].err, middleware.ErrInvalid)
				require.ErrorIs(t, got[0].err, middleware.ErrUnknownCommand)
				require.ErrorContains(t, got[0].err, "billing.Refund")
			},
		},
		{
			name:       "halted command is acked and answered",
			msg:        func(t *testing.T) *message.Message { return commandMessage(t, &CreateStaff{Email: "taken@x.org"}) },
			deliveries: 1,
			results:    1,
			check: func(t *testing.T, env *routerEnv, got []result) {
				require.Zero(t, env.handled.Load())
				require.ErrorIs(t, got[0].err, middleware.ErrAlreadyTaken)
				require.True(t, got[0].pipeline)
				require.False(t, got[0].handled)
			},
		},
		{
			name:       "handler error is nacked and redelivered",
			handle:     failOnce,
			msg:        func(t *testing.T) *message.Message { return commandMessage(t, &CreateStaff{Email: "ann@x.org"}) },
			deliveries: 2,
			results:    2,
			check: func(t *testing.T, env *routerEnv, got []result) {
				require.ErrorIs(t, got[0].err, errHandler)
				require.True(t, got[0].handled)
				require.NoError(t, got[1].err)
			},
		},
		{
			name:       "handler error is acked with AckHandlerErrors",
			cfg:        middleware.RouterConfig{AckHandlerErrors: true},
			handle:     failOnce,
			msg:        func(t *testing.T) *message.Message { return commandMessage(t, &CreateStaff{Email: "ann@x.org"}) },
			deliveries: 1,
			results:    1,
			check: func(t *testing.T, env *routerEnv, got []result) {
				require.ErrorIs(t, got[0].err, errHandler)
			},
		},
		{
			name: "handler panic is acked with AckHandlerErrors and answered",
			cfg:  middleware.RouterConfig{AckHandlerErrors: true},
			handle: func(*routerEnv) func(*message.Message) error {
				return func(*message.Message) error { panic("handler boom") }
			},
			msg:        func(t *testing.T) *message.Message { return commandMessage(t, &CreateStaff{Email: "ann@x.org"}) },
			deliveries: 1,
			results:    1,
			check: func(t *testing.T, env *routerEnv, got []result) {
				var perr *middleware.PanicError
				require.ErrorAs(t, got[0].err, &perr)
				require.False(t, got[0].handled)
			},
		},
		{
			name:        "a ResultFunc error nacks the command so that the answer is sent again",
			failResults: 1,
			msg:         func(t *testing.T) *message.Message { return commandMessage(t, &CreateStaff{Email: "taken@x.org"}) },
			deliveries:  2,
			results:     2,
			check: func(t *testing.T, env *routerEnv, got []result) {
				require.ErrorIs(t, got[1].err, middleware.ErrAlreadyTaken)
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			cfg := tt.cfg
			cfg.Runner = newRunner(t, halting)
			var outer []message.HandlerMiddleware
			poisonPubSub := newPubSub(t)
			if tt.poison != nil {
				poisoned, err := poisonPubSub.Subscribe(t.Context(), "poison")
				require.NoError(t, err)
				go func() {
					for m := range poisoned {
						m.Ack()
						tt.poison <- m
					}
				}()
				mw, err := wmiddleware.PoisonQueue(poisonPubSub, "poison")
				require.NoError(t, err)
				outer = append(outer, mw)
			}
			env := startRouterEnv(t, cfg, &results{failFirst: tt.failResults}, outer...)
			if tt.handle != nil {
				env.handle = tt.handle(env)
			}
			msg := tt.msg(t)
			publishAcked(t, env.pubSub, "commands", msg)
			require.Equal(t, tt.deliveries, env.deliveries.count(msg.UUID))
			got := env.results.list()
			require.Len(t, got, tt.results)
			tt.check(t, env, got)
			if tt.poison != nil {
				select {
				case poisoned := <-tt.poison:
					require.Equal(t, msg.UUID, poisoned.UUID)
					require.Contains(t, poisoned.Metadata.Get(wmiddleware.ReasonForPoisonedKey), "undecodable")
				case <-time.After(waitTimeout):
					t.Fatal("the undecodable message did not reach the poison queue")
				}
			}
		})
	}
}

func TestRouterConfigValidate(t *testing.T) {
	t.Parallel()
	err := middleware.RouterConfig{}.Validate()
	require.ErrorContains(t, err, "Runner is nil")
	require.ErrorContains(t, err, "Registry is nil")
	_, err = middleware.RouterMiddleware(middleware.RouterConfig{})
	require.Error(t, err)
	require.NoError(t, middleware.RouterConfig{Runner: newRunner(t), Registry: middleware.NewRegistry(nil)}.Validate())
}

// A message whose command name is not in the Registry passes on without
// the pipeline, and says so once per name: a Registry naming commands
// otherwise than the senders would let every command run unclaimed.
func TestRouterMiddlewareWarnsOncePerUnknownName(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	mw, err := middleware.RouterMiddleware(middleware.RouterConfig{
		Runner: newRunner(t), Registry: newRegistry(t),
		Logger: slog.New(slog.NewTextHandler(&buf, nil)),
	})
	require.NoError(t, err)
	passed := 0
	h := mw(func(*message.Message) ([]*message.Message, error) { passed++; return nil, nil })
	for _, name := range []string{"CreateStaff", "CreateStaff", "billing.Refund"} {
		msg := commandMessage(t, &CreateStaff{Email: "ann@x.org"})
		msg.Metadata.Set("name", name)
		_, err := h(msg)
		require.NoError(t, err)
	}
	require.Equal(t, 3, passed)
	out := buf.String()
	require.Equal(t, 2, strings.Count(out, "level=WARN"), out)
	require.Contains(t, out, "command=CreateStaff")
	require.Contains(t, out, "command=billing.Refund")
	require.Contains(t, out, "register its type")
}
