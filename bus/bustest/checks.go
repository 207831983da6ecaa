package bustest

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	wmmiddleware "github.com/ThreeDotsLabs/watermill/message/router/middleware"

	"github.com/claimbus/claimbus/internal/wire"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/claimbus/claimbus/bus"
	"github.com/claimbus/claimbus/middleware"
)

// checks are the tests of the suite, in the order Run starts them.
var checks = []check{
	{name: "RoundTrip", run: checkRoundTrip},
	{name: "Concurrent", run: checkConcurrent},
	{name: "Send", run: checkSend},
	{name: "Timeout", run: checkTimeout},
	{name: "HandlerErrorAnsweredOnce", run: checkHandlerErrorOnce},
	{name: "UnknownAndPoison", run: checkUnknownAndPoison},
	{name: "IDs", run: checkIDs},
	{name: "Lifecycle", run: checkLifecycle},
	{name: "CloseFailsPendingDispatch", run: checkCloseFailsPending},
	{name: "CloseLetsRunningFinish", run: checkCloseLetsRunningFinish},
	{name: "CloseWaitsThenCancels", run: checkCloseWaitsThenCancels},
	{name: "ConcurrentCloseWaits", run: checkConcurrentClose},
	{name: "Goexit", run: checkGoexit},
	{name: "DeadlineSkipsHandler", run: checkDeadlineSkipsHandler},
	{name: "CancelSkipsHandlerInProcess", run: checkCancelSkipsHandler},
	{name: "SendOutlivesItsContext", run: checkSendOutlivesContext},
	{name: "OnSend", run: checkOnSend},
	{name: "HandledOnceAcrossNodes", needs: needMultiNode, run: checkHandledOnce},
	{name: "CommandWaitsForAHandler", needs: func(h Harness) string {
		if !h.Durable {
			return "Durable"
		}
		return ""
	}, run: checkWaitsForHandler},
	{name: "Redelivery", needs: func(h Harness) string {
		if !h.Redelivery {
			return "Redelivery"
		}
		return ""
	}, run: checkRedelivery},
	{name: "LossNotifier", needs: func(h Harness) string {
		if !h.LossNotifier {
			return "LossNotifier"
		}
		return ""
	}, run: checkLoss},
}

// registerRoundTrip registers the handlers of the round trip.
func registerRoundTrip(t testing.TB) func(b *bus.Bus) {
	return func(b *bus.Bus) {
		require.NoError(t, bus.Handle(b, func(_ context.Context, c *echo) (echoResult, error) {
			return echoResult{Text: c.Text}, nil
		}))
		require.NoError(t, bus.Handle(b, func(_ context.Context, c *fail) (echoResult, error) {
			return echoResult{Text: "partial"}, errors.New("failed: " + c.Why)
		}))
		require.NoError(t, bus.Handle(b, func(_ context.Context, c *taken) (echoResult, error) {
			t.Errorf("the handler of a halted command ran")
			return echoResult{}, nil
		}))
		require.NoError(t, bus.Handle(b, func(_ context.Context, c *broken) (struct{}, error) {
			t.Errorf("the handler of an undecodable command ran")
			return struct{}{}, nil
		}))
		require.NoError(t, bus.Handle(b, func(context.Context, *panicky) (int, error) {
			t.Errorf("the handler of an undecodable command ran")
			return 0, nil
		}))
		require.NoError(t, bus.Handle(b, func(context.Context, *boom) (int, error) { panic("handler boom") }))
		require.NoError(t, bus.Handle(b, func(context.Context, *badResult) (panickyResult, error) {
			return panickyResult{}, nil
		}))
	}
}

// roundTripCommands are the commands of the round trip, one of each type.
var roundTripCommands = []any{&echo{}, &fail{}, &taken{}, &broken{}, &panicky{}, &boom{}, &badResult{}}

// Dispatch gets the handler's result, its error, the rejection of a halted
// command with its code, field and message, an invalid rejection for a
// command that cannot be decoded, and the panics of the handler and of its
// result's encoder as errors; from another node, and with every command
// acked.
func checkRoundTrip(e *env) {
	t := e.t
	h := e.node(bus.Config{Middleware: []middleware.Middleware{takenMiddleware}}, registerRoundTrip(t))
	s := e.sender(h, bus.Config{})
	ctx := e.ctx

	res, err := bus.Dispatch[echoResult](ctx, s.bus, &echo{Text: "hello"})
	require.NoError(t, err)
	require.Equal(t, echoResult{Text: "hello"}, res)

	// A value works as well as a pointer.
	res, err = bus.Dispatch[echoResult](ctx, s.bus, echo{Text: "value"})
	require.NoError(t, err)
	require.Equal(t, "value", res.Text)

	// A handler error: its message, a zero result.
	res, err = bus.Dispatch[echoResult](ctx, s.bus, &fail{Why: "boom"})
	require.Error(t, err)
	require.Zero(t, res)
	var remote *middleware.RemoteError
	require.ErrorAs(t, err, &remote)
	require.Equal(t, "failed: boom", remote.Message)

	// A halted command: the rejection as data, a zero result.
	res, err = bus.Dispatch[echoResult](ctx, s.bus, &taken{Email: "ann@x.org"})
	require.Zero(t, res)
	require.ErrorIs(t, err, middleware.ErrAlreadyTaken)
	require.NotErrorIs(t, err, middleware.ErrLocked)
	var rej *middleware.Rejection
	require.ErrorAs(t, err, &rej)
	require.Equal(t, middleware.CodeAlreadyTaken, rej.Code)
	require.Equal(t, "email", rej.Field)
	require.Equal(t, "email is already taken", rej.Message)

	// An undecodable command: an invalid rejection, no handler run.
	_, err = bus.Dispatch[struct{}](ctx, s.bus, &broken{})
	require.ErrorIs(t, err, middleware.ErrInvalid)
	require.ErrorContains(t, err, "undecodable command bustest.broken")
	require.ErrorContains(t, err, "broken on purpose")

	// A decoder that panics: an invalid command, not the end of the process.
	_, err = bus.Dispatch[int](ctx, s.bus, &panicky{})
	require.ErrorIs(t, err, middleware.ErrInvalid)
	require.ErrorContains(t, err, "decoder boom")
	require.ErrorContains(t, err, "panic in command decoder")

	// A handler that panics: the command's error.
	_, err = bus.Dispatch[int](ctx, s.bus, &boom{})
	require.ErrorAs(t, err, &remote)
	require.Contains(t, remote.Message, "panic in handler")
	require.Contains(t, remote.Message, "handler boom")

	// A result whose encoder panics: the command's error.
	_, err = bus.Dispatch[struct{}](ctx, s.bus, &badResult{})
	require.ErrorAs(t, err, &remote)
	require.Contains(t, remote.Message, "encoder boom")
	require.Contains(t, remote.Message, "panic in result encoder")

	// A result the sender cannot decode.
	_, err = bus.Dispatch[int](ctx, s.bus, &echo{Text: "x"})
	require.ErrorIs(t, err, bus.ErrUndecodableReply)

	// And the bus still works.
	res, err = bus.Dispatch[echoResult](ctx, s.bus, &echo{Text: "alive"})
	require.NoError(t, err)
	require.Equal(t, "alive", res.Text)

	require.Zero(t, s.bus.Pending())
	require.Zero(t, h.bus.Pending())
	h.requireAllAcked(t, 10)
	for _, c := range roundTripCommands {
		e.requireAcked("command." + h.bus.CommandName(c))
	}
	// Replies to another node are acked; replies to itself never travel.
	e.requireAcked(s.replyTopic(), h.replyTopic())
}

// Many Dispatch calls at once from several goroutines each get their own
// outcome.
func checkConcurrent(e *env) {
	t := e.t
	h := e.node(bus.Config{Middleware: []middleware.Middleware{takenMiddleware}}, registerRoundTrip(t))
	s := e.sender(h, bus.Config{})
	var wg sync.WaitGroup
	for g := range 16 {
		wg.Go(func() {
			for i := range 50 {
				text := fmt.Sprintf("%d-%d", g, i)
				res, err := bus.Dispatch[echoResult](e.ctx, s.bus, &echo{Text: text})
				if err != nil || res.Text != text {
					t.Errorf("Dispatch(%s) = %q, %v", text, res.Text, err)
					return
				}
				if _, err := bus.Dispatch[echoResult](e.ctx, s.bus, &taken{}); !errors.Is(err, middleware.ErrAlreadyTaken) {
					t.Errorf("Dispatch(taken) error = %v", err)
					return
				}
			}
		})
	}
	wg.Wait()
	require.Zero(t, s.bus.Pending())
	h.requireAllAcked(t, 16*50*2)
}

// Send hands commands over and returns; their handlers run, a handler
// error and a rejection go unheard.
func checkSend(e *env) {
	t := e.t
	got := make(chan string, 10)
	h := e.node(bus.Config{Middleware: []middleware.Middleware{takenMiddleware}}, func(b *bus.Bus) {
		require.NoError(t, bus.Handle(b, func(_ context.Context, c *echo) (struct{}, error) {
			got <- c.Text
			return struct{}{}, nil
		}))
		require.NoError(t, bus.Handle(b, func(_ context.Context, c *fail) (struct{}, error) {
			got <- "fail"
			return struct{}{}, errors.New("nobody hears this")
		}))
		require.NoError(t, bus.Handle(b, func(_ context.Context, c *taken) (struct{}, error) {
			t.Errorf("the handler of a halted command ran")
			return struct{}{}, nil
		}))
	})
	s := e.sender(h, bus.Config{})
	require.NoError(t, s.bus.Send(e.ctx, &echo{Text: "one"}))
	require.NoError(t, s.bus.Send(e.ctx, &fail{}))
	require.NoError(t, s.bus.Send(e.ctx, &taken{}))
	require.NoError(t, s.bus.Send(e.ctx, &echo{Text: "two"}))
	seen := map[string]bool{}
	for range 3 {
		seen[recv(t, got, "a sent command to be handled")] = true
	}
	require.Equal(t, map[string]bool{"one": true, "two": true, "fail": true}, seen)
	require.Zero(t, s.bus.Pending())
	h.requireAllAcked(t, 4)
}

// A Dispatch whose ctx ends first returns an error naming the
// command and leaves nothing pending; the late reply is dropped and the
// bus goes on working. A ctx already done sends nothing.
func checkTimeout(e *env) {
	t := e.t
	release, started := make(chan struct{}), make(chan struct{})
	releaseOnce := sync.OnceFunc(func() { close(release) })
	defer releaseOnce()
	var handled atomic.Int32
	h := e.node(bus.Config{}, func(b *bus.Bus) {
		require.NoError(t, bus.Handle(b, func(ctx context.Context, c *block) (int, error) {
			if c.ID == 1 {
				close(started)
				select {
				case <-release:
				case <-ctx.Done(): // Close gave up waiting
				}
			}
			handled.Add(1)
			return c.ID, nil
		}))
	})
	s := e.sender(h, bus.Config{})

	// The deadline leaves the handler time to start (else it is skipped:
	// see DeadlineSkipsHandler), and passes while it runs.
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	errc := make(chan error, 1)
	go func() {
		_, err := bus.Dispatch[int](ctx, s.bus, &block{ID: 1})
		errc <- err
	}()
	recv(t, started, "the handler to start")
	err := <-errc
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.ErrorIs(t, err, middleware.ErrTimeout)
	m := regexp.MustCompile(`no reply to command bustest\.block \(id ([^)]*)\)`).FindStringSubmatch(err.Error())
	require.NotNil(t, m, "the error names the command and its id: %v", err)
	_, perr := uuid.Parse(m[1])
	require.NoError(t, perr, "the command id is a UUID")
	require.Zero(t, s.bus.Pending(), "the waiter is removed")

	// The late reply is dropped (and acked), and the bus goes on working.
	releaseOnce()
	require.Eventually(t, func() bool { return handled.Load() == 1 }, waitFor, time.Millisecond, "the blocked handler to finish")
	e.requireAcked(s.replyTopic())
	got, err := bus.Dispatch[int](e.ctx, s.bus, &block{ID: 2})
	require.NoError(t, err)
	require.Equal(t, 2, got)
	require.Zero(t, s.bus.Pending())

	// A ctx already done: nothing is sent.
	done, cancelDone := context.WithCancel(context.Background())
	cancelDone()
	_, err = bus.Dispatch[int](done, s.bus, &block{ID: 3})
	require.ErrorIs(t, err, context.Canceled)
	require.ErrorIs(t, err, middleware.ErrTimeout)
	require.Zero(t, s.bus.Pending())
	require.EqualValues(t, 2, handled.Load())
	h.requireAllAcked(t, 2)
}

// A handler error is an answer: the sender hears it once, the command is
// acked and never delivered again (not even after the transport's ack
// deadline, where it has one).
func checkHandlerErrorOnce(e *env) {
	t := e.t
	if e.h.Redelivery {
		e.redeliverAfter = redeliverAfter
	}
	var calls atomic.Int32
	h := e.node(bus.Config{}, func(b *bus.Bus) {
		require.NoError(t, bus.Handle(b, func(_ context.Context, c *fail) (int, error) {
			calls.Add(1)
			return 0, errors.New("no")
		}))
	})
	s := e.sender(h, bus.Config{})
	_, err := bus.Dispatch[int](e.ctx, s.bus, &fail{})
	require.ErrorContains(t, err, "no")
	h.requireAllAcked(t, 1)
	e.requireAcked("command." + h.bus.CommandName(&fail{}))
	if e.h.Redelivery {
		// Past the ack deadline: an acked command stays acked.
		time.Sleep(2 * redeliverAfter) //nolint:forbidigo // proves an absence (no redelivery past the ack deadline): nothing signals what does not happen
	}
	require.NoError(t, h.bus.Close())
	require.EqualValues(t, 1, calls.Load())
}

// A command nobody handles: in process, ErrNoHandler at once; through a
// transport, the node that receives it answers a waiting sender with an
// invalid rejection, and sends it to the poison topic when nobody waits,
// as it does a message that is no command or cannot be decoded; each is
// acked, and the node goes on working.
func checkUnknownAndPoison(e *env) {
	t := e.t
	var calls atomic.Int32
	// Every command on one topic: the handling node sees names it does not know.
	oneTopic := func(string) string { return "command.all" }
	reg := func(b *bus.Bus) {
		require.NoError(t, bus.Handle(b, func(_ context.Context, c *echo) (echoResult, error) {
			calls.Add(1)
			return echoResult(*c), nil
		}))
	}
	probe, _ := e.config(bus.Config{})
	if probe.Publisher == nil {
		t.Log("bustest: in process: an unknown command is refused by the sender with bus.ErrNoHandler")
		h := e.node(bus.Config{}, reg)
		_, err := bus.Dispatch[struct{}](e.ctx, h.bus, &orphan{})
		require.ErrorIs(t, err, bus.ErrNoHandler)
		require.ErrorContains(t, err, "bustest.orphan")
		require.ErrorIs(t, h.bus.Send(e.ctx, &orphan{}), bus.ErrNoHandler)
		return
	}
	h := e.node(bus.Config{CommandTopic: oneTopic, PoisonTopic: "poison"}, reg)
	poison, err := h.rec.Subscriber.Subscribe(t.Context(), "poison")
	require.NoError(t, err)
	s := e.node(bus.Config{CommandTopic: oneTopic}, nil)

	_, err = bus.Dispatch[struct{}](e.ctx, s.bus, &orphan{})
	require.ErrorIs(t, err, middleware.ErrInvalid)
	require.ErrorContains(t, err, `unknown command "bustest.orphan"`)

	// Sent, nobody waits: poisoned. So are a message that is no command and
	// one that cannot be decoded.
	require.NoError(t, s.bus.Send(e.ctx, &orphan{}))
	unknown := message.NewMessage(uuid.NewString(), []byte("{}"))
	require.NoError(t, h.cfg.Publisher.Publish("command.all", unknown))
	garbage := message.NewMessage(uuid.NewString(), []byte("not json"))
	garbage.Metadata.Set(wire.MetadataCommandName, "bustest.echo")
	require.NoError(t, h.cfg.Publisher.Publish("command.all", garbage))
	reasons := map[string]string{}
	for range 3 {
		pm := recv(t, poison, "a poison message")
		reasons[pm.UUID] = pm.Metadata.Get(wmmiddleware.ReasonForPoisonedKey)
		pm.Ack()
	}
	require.Len(t, reasons, 3)
	require.Contains(t, reasons[unknown.UUID], `unknown command ""`)
	require.Contains(t, reasons[garbage.UUID], "undecodable command bustest.echo")
	delete(reasons, unknown.UUID)
	delete(reasons, garbage.UUID)
	for _, r := range reasons {
		require.Contains(t, r, `unknown command "bustest.orphan"`)
	}
	require.Zero(t, calls.Load())
	h.requireAllAcked(t, 4)
	e.requireAcked("command.all", "poison")

	// The handler still works.
	res, err := bus.Dispatch[echoResult](e.ctx, s.bus, &echo{Text: "ok"})
	require.NoError(t, err)
	require.Equal(t, "ok", res.Text)
	require.EqualValues(t, 1, calls.Load())
}

// A command carries its correlation and causation ids: a handler's ctx
// carries its own, so a command it dispatches keeps the correlation and is
// caused by it; without ids in ctx a command starts its own correlation.
// Across nodes too.
func checkIDs(e *env) {
	t := e.t
	type seen struct{ id, correlation, causation string }
	var mu sync.Mutex
	ids := map[string]seen{}
	record := middleware.Hooks{OnBeforeDispatch: func(_ context.Context, p *middleware.Pipeline) {
		mu.Lock()
		defer mu.Unlock()
		ids[p.CommandName] = seen{p.CommandUUID, p.CorrelationID, p.CausationID}
	}}
	get := func() (seen, seen) {
		mu.Lock()
		defer mu.Unlock()
		return ids["bustest.parent"], ids["bustest.child"]
	}
	h := e.node(bus.Config{Middleware: []middleware.Middleware{record}}, func(b *bus.Bus) {
		require.NoError(t, bus.Handle(b, func(ctx context.Context, _ *parent) (string, error) {
			return bus.Dispatch[string](ctx, b, &child{})
		}))
		require.NoError(t, bus.Handle(b, func(ctx context.Context, _ *child) (string, error) {
			got, _ := middleware.IDsFromContext(ctx)
			return got.CorrelationID + "/" + got.CausationID, nil
		}))
	})

	// Without ids in ctx, the parent starts its own correlation.
	out, err := bus.Dispatch[string](e.ctx, h.bus, &parent{})
	require.NoError(t, err)
	p, c := get()
	for _, id := range []string{p.id, c.id} {
		_, err := uuid.Parse(id)
		require.NoError(t, err, "command ids are UUIDs")
	}
	require.NotEqual(t, p.id, c.id)
	require.Equal(t, p.id, p.correlation)
	require.Empty(t, p.causation)
	require.Equal(t, p.id, c.correlation, "the correlation is kept")
	require.Equal(t, p.id, c.causation, "the child is caused by the parent")
	require.Equal(t, p.id+"/"+c.id, out, "the handler's ctx carries its own ids")

	// Ids in ctx are carried, from another node as well: the child is
	// delivered while its parent is being handled.
	s := e.sender(h, bus.Config{})
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	ctx = middleware.WithIDs(ctx, middleware.IDs{CorrelationID: "flow-7", CausationID: "request-9"})
	out, err = bus.Dispatch[string](ctx, s.bus, &parent{})
	require.NoError(t, err)
	p, c = get()
	require.Equal(t, "flow-7/"+c.id, out)
	require.Equal(t, "flow-7", p.correlation)
	require.Equal(t, "request-9", p.causation)
	require.Equal(t, "flow-7", c.correlation)
	require.Equal(t, p.id, c.causation)
	_, err = uuid.Parse(c.id)
	require.NoError(t, err)
}
