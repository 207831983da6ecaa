package bus_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/claimbus/claimbus/bus"
	"github.com/claimbus/claimbus/middleware"
)

// registerAll registers the handlers of the round-trip tests.
func registerAll(t testing.TB) func(b *bus.Bus) {
	return func(b *bus.Bus) {
		require.NoError(t, bus.Handle(b, func(_ context.Context, c *Echo) (EchoResult, error) {
			return EchoResult{Text: c.Text}, nil
		}))
		require.NoError(t, bus.Handle(b, func(_ context.Context, c *Fail) (EchoResult, error) {
			return EchoResult{Text: "partial"}, errors.New("failed: " + c.Why)
		}))
		require.NoError(t, bus.Handle(b, func(_ context.Context, c *Taken) (EchoResult, error) {
			t.Errorf("the handler of a halted command ran")
			return EchoResult{}, nil
		}))
		require.NoError(t, bus.Handle(b, func(_ context.Context, c *Broken) (struct{}, error) {
			t.Errorf("the handler of an undecodable command ran")
			return struct{}{}, nil
		}))
	}
}

func TestDispatchRoundTrip(t *testing.T) {
	t.Parallel()
	inEachMode(t, func(t *testing.T, cfg bus.Config) {
		cfg.Middleware = []middleware.Middleware{takenMiddleware}
		b := startBus(t, cfg, registerAll(t))
		ctx := context.Background()

		res, err := bus.Dispatch[EchoResult](ctx, b, &Echo{Text: "hello"})
		require.NoError(t, err)
		require.Equal(t, EchoResult{Text: "hello"}, res)

		// A value works as well as a pointer.
		res, err = bus.Dispatch[EchoResult](ctx, b, Echo{Text: "value"})
		require.NoError(t, err)
		require.Equal(t, "value", res.Text)

		// A handler error: its message, a zero result.
		res, err = bus.Dispatch[EchoResult](ctx, b, &Fail{Why: "boom"})
		require.Error(t, err)
		require.Zero(t, res)
		var remote *middleware.RemoteError
		require.ErrorAs(t, err, &remote)
		require.Equal(t, "failed: boom", remote.Message)

		// A halted command: the rejection as data, a zero result.
		res, err = bus.Dispatch[EchoResult](ctx, b, &Taken{Email: "ann@x.org"})
		require.Zero(t, res)
		require.ErrorIs(t, err, middleware.ErrAlreadyTaken)
		require.NotErrorIs(t, err, middleware.ErrLocked)
		var rej *middleware.Rejection
		require.ErrorAs(t, err, &rej)
		require.Equal(t, "email", rej.Field)
		require.Equal(t, "email is already taken", rej.Message)

		// An undecodable command: an invalid rejection, no handler run.
		_, err = bus.Dispatch[struct{}](ctx, b, &Broken{})
		require.ErrorIs(t, err, middleware.ErrInvalid)
		require.ErrorContains(t, err, "undecodable command bus_test.Broken")
		require.ErrorContains(t, err, "broken on purpose")

		// A result the sender cannot decode.
		_, err = bus.Dispatch[int](ctx, b, &Echo{Text: "x"})
		require.ErrorIs(t, err, bus.ErrUndecodableReply)

		require.Zero(t, b.Pending())
	})
}

func TestDispatchConcurrent(t *testing.T) {
	t.Parallel()
	inEachMode(t, func(t *testing.T, cfg bus.Config) {
		cfg.Middleware = []middleware.Middleware{takenMiddleware}
		b := startBus(t, cfg, registerAll(t))
		var wg sync.WaitGroup
		for g := range 16 {
			wg.Go(func() {
				for i := range 50 {
					text := fmt.Sprintf("%d-%d", g, i)
					res, err := bus.Dispatch[EchoResult](context.Background(), b, &Echo{Text: text})
					if err != nil || res.Text != text {
						t.Errorf("Dispatch(%s) = %q, %v", text, res.Text, err)
						return
					}
					if _, err := bus.Dispatch[EchoResult](context.Background(), b, &Taken{}); !errors.Is(err, middleware.ErrAlreadyTaken) {
						t.Errorf("Dispatch(Taken) error = %v", err)
						return
					}
				}
			})
		}
		wg.Wait()
		require.Zero(t, b.Pending())
	})
}

func TestDispatchTimeoutLeavesNothingPending(t *testing.T) {
	t.Parallel()
	inEachMode(t, func(t *testing.T, cfg bus.Config) {
		release := make(chan struct{})
		var handled atomic.Int32
		b := startBus(t, cfg, func(b *bus.Bus) {
			require.NoError(t, bus.Handle(b, func(_ context.Context, c *Block) (int, error) {
				if c.ID == 1 {
					<-release
				}
				handled.Add(1)
				return c.ID, nil
			}))
		})

		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
		defer cancel()
		_, err := bus.Dispatch[int](ctx, b, &Block{ID: 1})
		require.ErrorIs(t, err, context.DeadlineExceeded)
		require.ErrorIs(t, err, middleware.ErrTimeout)
		var te *bus.TimeoutError
		require.ErrorAs(t, err, &te)
		require.Equal(t, "bus_test.Block", te.CommandName)
		_, perr := uuid.Parse(te.CommandID)
		require.NoError(t, perr, "the command id is a UUID")
		require.ErrorContains(t, err, te.CommandID)
		require.Zero(t, b.Pending(), "the waiter is removed")

		// The late reply is dropped, and the bus goes on working.
		close(release)
		eventually(t, func() bool { return handled.Load() == 1 }, "the blocked handler to finish")
		got, err := bus.Dispatch[int](context.Background(), b, &Block{ID: 2})
		require.NoError(t, err)
		require.Equal(t, 2, got)
		require.Zero(t, b.Pending())

		// A ctx already done: nothing is sent.
		done, cancelDone := context.WithCancel(context.Background())
		cancelDone()
		_, err = bus.Dispatch[int](done, b, &Block{ID: 3})
		require.ErrorIs(t, err, context.Canceled)
		require.ErrorIs(t, err, middleware.ErrTimeout)
		require.Zero(t, b.Pending())
		require.EqualValues(t, 2, handled.Load())
	})
}

func TestHandlerErrorAnsweredOnceNotRedelivered(t *testing.T) {
	t.Parallel()
	ps := newGoChannel(t)
	rec := &ackRecorder{Subscriber: ps}
	t.Cleanup(rec.wg.Wait)
	var calls atomic.Int32
	b := startBus(t, bus.Config{Publisher: ps, Subscriber: rec}, func(b *bus.Bus) {
		require.NoError(t, bus.Handle(b, func(_ context.Context, c *Fail) (int, error) {
			calls.Add(1)
			return 0, errors.New("no")
		}))
	})
	_, err := bus.Dispatch[int](context.Background(), b, &Fail{})
	require.ErrorContains(t, err, "no")
	// Commands and replies share the recorder: keep the command's.
	requireAckedOnce(t, commandsOnly(rec))
	require.NoError(t, b.Close())
	require.EqualValues(t, 1, calls.Load())
}

// commandsOnly returns a recorder with the command messages of r.
func commandsOnly(r *ackRecorder) *ackRecorder {
	out := &ackRecorder{}
	for _, m := range r.delivered() {
		if m.Metadata.Get(bus.MetadataCommandID) == "" {
			out.msgs = append(out.msgs, m)
		}
	}
	return out
}

func TestUnknownCommand(t *testing.T) {
	t.Parallel()
	ps := newGoChannel(t)
	rec := &ackRecorder{Subscriber: ps}
	t.Cleanup(rec.wg.Wait)
	// Every command on one topic: the handling bus sees names it does not know.
	oneTopic := func(string) string { return "command.all" }
	poison, err := ps.Subscribe(t.Context(), "poison")
	require.NoError(t, err)

	startBus(t, bus.Config{Publisher: ps, Subscriber: rec, CommandTopic: oneTopic, PoisonTopic: "poison"}, func(b *bus.Bus) {
		require.NoError(t, bus.Handle(b, func(_ context.Context, c *Echo) (EchoResult, error) { return EchoResult(*c), nil }))
	})
	sender := startBus(t, bus.Config{Publisher: ps, Subscriber: ps, CommandTopic: oneTopic}, nil)

	_, err = bus.Dispatch[struct{}](context.Background(), sender, &Orphan{})
	require.ErrorIs(t, err, middleware.ErrInvalid)
	require.ErrorContains(t, err, `unknown command "bus_test.Orphan"`)
	requireAckedOnce(t, rec)

	// Sent, nobody waits: it goes to the poison topic, acked.
	require.NoError(t, sender.Send(context.Background(), &Orphan{}))
	select {
	case pm := <-poison:
		require.Contains(t, pm.Metadata.Get(bus.MetadataPoisonReason), `unknown command "bus_test.Orphan"`)
		pm.Ack()
	case <-time.After(10 * time.Second):
		t.Fatal("no poison message")
	}

	// A message that is not a command at all: poisoned, acked, no crash.
	raw := message.NewMessage(uuid.NewString(), []byte("garbage"))
	require.NoError(t, ps.Publish("command.all", raw))
	select {
	case pm := <-poison:
		require.Contains(t, pm.Metadata.Get(bus.MetadataPoisonReason), `unknown command ""`)
		pm.Ack()
	case <-time.After(10 * time.Second):
		t.Fatal("no poison message")
	}
	for _, m := range rec.delivered() {
		select {
		case <-m.Acked():
		case <-time.After(10 * time.Second):
			t.Fatal("a command message was not acked")
		}
	}

	// The handler still works.
	res, err := bus.Dispatch[EchoResult](context.Background(), sender, &Echo{Text: "ok"})
	require.NoError(t, err)
	require.Equal(t, "ok", res.Text)
}

func TestSend(t *testing.T) {
	t.Parallel()
	inEachMode(t, func(t *testing.T, cfg bus.Config) {
		got := make(chan string, 10)
		cfg.Middleware = []middleware.Middleware{takenMiddleware}
		b := startBus(t, cfg, func(b *bus.Bus) {
			require.NoError(t, bus.Handle(b, func(_ context.Context, c *Echo) (struct{}, error) {
				got <- c.Text
				return struct{}{}, nil
			}))
			require.NoError(t, bus.Handle(b, func(_ context.Context, c *Fail) (struct{}, error) {
				got <- "fail"
				return struct{}{}, errors.New("nobody hears this")
			}))
			require.NoError(t, bus.Handle(b, func(_ context.Context, c *Taken) (struct{}, error) {
				t.Errorf("the handler of a halted command ran")
				return struct{}{}, nil
			}))
		})
		require.NoError(t, b.Send(context.Background(), &Echo{Text: "one"}))
		require.NoError(t, b.Send(context.Background(), &Fail{}))
		require.NoError(t, b.Send(context.Background(), &Taken{}))
		require.NoError(t, b.Send(context.Background(), &Echo{Text: "two"}))
		seen := map[string]bool{}
		for range 3 {
			select {
			case s := <-got:
				seen[s] = true
			case <-time.After(10 * time.Second):
				t.Fatal("a sent command was not handled")
			}
		}
		require.Equal(t, map[string]bool{"one": true, "two": true, "fail": true}, seen)
		require.Zero(t, b.Pending())
	})
}

func TestIDsPropagate(t *testing.T) {
	t.Parallel()
	inEachMode(t, func(t *testing.T, cfg bus.Config) {
		type seen struct{ id, correlation, causation string }
		var mu sync.Mutex
		ids := map[string]seen{}
		record := middleware.Hooks{OnBeforeDispatch: func(_ context.Context, p *middleware.Pipeline) {
			mu.Lock()
			defer mu.Unlock()
			ids[p.CommandName] = seen{p.CommandUUID, p.CorrelationID, p.CausationID}
		}}
		cfg.Middleware = []middleware.Middleware{record}
		b := startBus(t, cfg, func(b *bus.Bus) {
			require.NoError(t, bus.Handle(b, func(ctx context.Context, _ *Parent) (string, error) {
				return bus.Dispatch[string](ctx, b, &Child{})
			}))
			require.NoError(t, bus.Handle(b, func(ctx context.Context, _ *Child) (string, error) {
				got, _ := middleware.IDsFromContext(ctx)
				return got.CorrelationID + "/" + got.CausationID, nil
			}))
		})

		// Without ids in ctx, the parent starts its own correlation.
		out, err := bus.Dispatch[string](context.Background(), b, &Parent{})
		require.NoError(t, err)
		parent, child := ids["bus_test.Parent"], ids["bus_test.Child"]
		for _, id := range []string{parent.id, child.id} {
			_, err := uuid.Parse(id)
			require.NoError(t, err, "command ids are UUIDs")
		}
		require.NotEqual(t, parent.id, child.id)
		require.Equal(t, parent.id, parent.correlation)
		require.Empty(t, parent.causation)
		require.Equal(t, parent.id, child.correlation, "the correlation is kept")
		require.Equal(t, parent.id, child.causation, "the child is caused by the parent")
		require.Equal(t, parent.id+"/"+child.id, out, "the handler's ctx carries its own ids")

		// Ids in ctx are carried.
		ctx := middleware.WithIDs(context.Background(), middleware.IDs{CorrelationID: "flow-7", CausationID: "request-9"})
		_, err = bus.Dispatch[string](ctx, b, &Parent{})
		require.NoError(t, err)
		parent, child = ids["bus_test.Parent"], ids["bus_test.Child"]
		require.Equal(t, "flow-7", parent.correlation)
		require.Equal(t, "request-9", parent.causation)
		require.Equal(t, "flow-7", child.correlation)
		require.Equal(t, parent.id, child.causation)
	})
}

// Panicky's decoder panics on every payload.
type Panicky struct{}

func (*Panicky) UnmarshalJSON([]byte) error { panic("decoder boom") }

// A command whose decoder panics is an invalid command, not the end of
// the process.
func TestDecoderPanic(t *testing.T) {
	t.Parallel()
	inEachMode(t, func(t *testing.T, cfg bus.Config) {
		b := startBus(t, cfg, func(b *bus.Bus) {
			require.NoError(t, bus.Handle(b, func(context.Context, *Panicky) (int, error) {
				t.Errorf("the handler of an undecodable command ran")
				return 0, nil
			}))
			require.NoError(t, bus.Handle(b, func(_ context.Context, c *Echo) (string, error) { return c.Text, nil }))
		})
		_, err := bus.Dispatch[int](context.Background(), b, &Panicky{})
		require.ErrorIs(t, err, middleware.ErrInvalid)
		require.ErrorContains(t, err, "decoder boom")
		require.ErrorContains(t, err, "panic in command decoder")
		got, err := bus.Dispatch[string](context.Background(), b, &Echo{Text: "alive"})
		require.NoError(t, err)
		require.Equal(t, "alive", got)
	})
}

// PanickyResult's encoder panics.
type PanickyResult struct{}

func (PanickyResult) MarshalJSON() ([]byte, error) { panic("encoder boom") }

// A result whose encoder panics is the command's error, not the end of the
// process.
func TestResultEncoderPanic(t *testing.T) {
	t.Parallel()
	inEachMode(t, func(t *testing.T, cfg bus.Config) {
		b := startBus(t, cfg, func(b *bus.Bus) {
			require.NoError(t, bus.Handle(b, func(context.Context, *Block) (PanickyResult, error) {
				return PanickyResult{}, nil
			}))
		})
		_, err := bus.Dispatch[struct{}](context.Background(), b, &Block{})
		var remote *middleware.RemoteError
		require.ErrorAs(t, err, &remote)
		require.Contains(t, remote.Message, "encoder boom")
		require.Contains(t, remote.Message, "panic in result encoder")
	})
}
