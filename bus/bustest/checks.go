package bustest

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/claimbus/claimbus/internal/wire"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/claimbus/claimbus/bus"
	"github.com/claimbus/claimbus/internal/testwait"
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
		e.requireAcked(bus.DefaultCommandTopic(h.bus.CommandName(c)))
	}
	// Replies to another node are acked; replies to itself never travel.
	e.requireAcked(s.bus.ReplyTopic(), h.bus.ReplyTopic())
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

// A Dispatch whose ctx ends first returns a *bus.TimeoutError naming the
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
	var te *bus.TimeoutError
	require.ErrorAs(t, err, &te)
	require.Equal(t, "bustest.block", te.CommandName)
	_, perr := uuid.Parse(te.CommandID)
	require.NoError(t, perr, "the command id is a UUID")
	require.ErrorContains(t, err, te.CommandID)
	require.Zero(t, s.bus.Pending(), "the waiter is removed")

	// The late reply is dropped (and acked), and the bus goes on working.
	releaseOnce()
	require.Eventually(t, func() bool { return handled.Load() == 1 }, waitFor, time.Millisecond, "the blocked handler to finish")
	e.requireAcked(s.bus.ReplyTopic())
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
	e.requireAcked(bus.DefaultCommandTopic(h.bus.CommandName(&fail{})))
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
		reasons[pm.UUID] = pm.Metadata.Get(bus.MetadataPoisonReason)
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

// Handle refuses duplicates and a nil handler, and comes before Start;
// Dispatch and Send fail with ErrNotStarted before Start, ErrNilCommand for
// nil, and ErrClosed once closed; Start twice is ErrStarted; Close is
// idempotent.
func checkLifecycle(e *env) {
	t := e.t
	cfg, _ := e.config(bus.Config{})
	b, err := bus.New(cfg)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, b.Close()) })
	echoH := func(_ context.Context, c *echo) (string, error) { return c.Text, nil }
	require.NoError(t, bus.Handle(b, echoH))
	require.ErrorIs(t, bus.Handle(b, echoH), bus.ErrDuplicateHandler)
	require.Error(t, bus.Handle[echo, string](b, nil))

	_, err = bus.Dispatch[string](e.ctx, b, &echo{})
	require.ErrorIs(t, err, bus.ErrNotStarted)
	require.ErrorIs(t, b.Send(e.ctx, &echo{}), bus.ErrNotStarted)

	require.NoError(t, b.Start(context.Background()))
	require.ErrorIs(t, b.Start(context.Background()), bus.ErrStarted)
	require.ErrorIs(t, bus.Handle(b, func(context.Context, *fail) (string, error) { return "", nil }), bus.ErrStarted)
	_, err = bus.Dispatch[string](e.ctx, b, nil)
	require.ErrorIs(t, err, bus.ErrNilCommand)

	got, err := bus.Dispatch[string](e.ctx, b, &echo{Text: "up"})
	require.NoError(t, err)
	require.Equal(t, "up", got)

	require.NoError(t, b.Close())
	require.NoError(t, b.Close(), "Close is idempotent")
	_, err = bus.Dispatch[string](e.ctx, b, &echo{})
	require.ErrorIs(t, err, bus.ErrClosed)
	require.ErrorIs(t, b.Send(e.ctx, &echo{}), bus.ErrClosed)
	require.ErrorIs(t, b.Start(context.Background()), bus.ErrClosed)
	require.Zero(t, b.Pending())
}

// A Dispatch waiting for a reply that cannot come (nobody handles its
// command) gets ErrClosed at Close. In process there is no such wait: see
// UnknownAndPoison.
func checkCloseFailsPending(e *env) {
	t := e.t
	n := e.node(bus.Config{}, nil)
	if n.inProcess() {
		t.Log("bustest: in process: a command without a handler is refused at once (bus.ErrNoHandler), never pending")
		return
	}
	done := make(chan error, 1)
	go func() {
		_, err := bus.Dispatch[struct{}](e.ctx, n.bus, &orphan{})
		done <- err
	}()
	require.Eventually(t, func() bool { return n.bus.Pending() == 1 }, waitFor, time.Millisecond, "the dispatch to wait")
	require.NoError(t, n.bus.Close())
	err := recv(t, done, "Dispatch to return at Close")
	require.ErrorIs(t, err, bus.ErrClosed)
	require.ErrorContains(t, err, "bustest.orphan")
	require.Zero(t, n.bus.Pending())
}

// Close waits for a running handler for CloseTimeout, then cancels its
// context; the handler's answer reaches its sender and the after hooks
// run. (That a handler finishing within CloseTimeout replies is
// checkCloseLetsRunningFinish's.)
func checkCloseWaitsThenCancels(e *env) {
	t := e.t
	started := make(chan struct{})
	afterRan := make(chan error, 1)
	cfg := bus.Config{CloseTimeout: 50 * time.Millisecond, Middleware: []middleware.Middleware{middleware.Hooks{
		OnAfterFailure: func(ctx context.Context, p *middleware.Pipeline) { offer(afterRan, p.Err()) },
	}}}
	n := e.node(cfg, func(b *bus.Bus) {
		require.NoError(t, bus.Handle(b, func(ctx context.Context, _ *block) (int, error) {
			close(started)
			<-ctx.Done()
			return 0, ctx.Err()
		}))
	})
	done := make(chan error, 1)
	go func() {
		_, err := bus.Dispatch[int](e.ctx, n.bus, &block{})
		done <- err
	}()
	recv(t, started, "the handler to start")
	require.NoError(t, n.bus.Close())
	// The handler's answer reached the sender before Close returned.
	var remote *middleware.RemoteError
	require.ErrorAs(t, recv(t, done, "Dispatch's answer"), &remote)
	require.Equal(t, context.Canceled.Error(), remote.Message)
	require.ErrorIs(t, recv(t, afterRan, "the after hooks"), context.Canceled, "the after hooks ran")
	n.requireAllAcked(t, 1)
}

// A handler running when Close begins finishes within CloseTimeout and its
// answer reaches its sender: Close waits for it and does not cancel it.
func checkCloseLetsRunningFinish(e *env) {
	t := e.t
	started, release := make(chan struct{}), make(chan struct{})
	n := e.node(bus.Config{CloseTimeout: waitFor}, func(b *bus.Bus) {
		require.NoError(t, bus.Handle(b, func(ctx context.Context, c *block) (int, error) {
			close(started)
			select {
			case <-release:
				return c.ID, nil
			case <-ctx.Done():
				return 0, ctx.Err()
			}
		}))
		require.NoError(t, bus.Handle(b, func(context.Context, *echo) (struct{}, error) { return struct{}{}, nil }))
	})
	done := make(chan error, 1)
	go func() {
		got, err := bus.Dispatch[int](e.ctx, n.bus, &block{ID: 7})
		if err == nil && got != 7 {
			err = fmt.Errorf("answer %d, want 7", got)
		}
		done <- err
	}()
	recv(t, started, "the handler to start")
	closed := make(chan error, 1)
	go func() { closed <- n.bus.Close() }()
	require.Eventually(t, func() bool {
		return errors.Is(n.bus.Send(e.ctx, &echo{}), bus.ErrClosed)
	}, waitFor, time.Millisecond, "Close to begin")
	close(release)
	require.NoError(t, recv(t, closed, "Close"))
	require.NoError(t, recv(t, done, "Dispatch's answer"), "the handler finished and replied during Close")
}

// A Close that finds another Close under way waits for it: when it
// returns, every handler has returned.
func checkConcurrentClose(e *env) {
	t := e.t
	started := make(chan struct{})
	var returned atomic.Bool
	n := e.node(bus.Config{CloseTimeout: time.Second}, func(b *bus.Bus) {
		require.NoError(t, bus.Handle(b, func(ctx context.Context, _ *block) (int, error) {
			close(started)
			<-ctx.Done() // cancelled by Close after CloseTimeout
			returned.Store(true)
			return 0, nil
		}))
		// The probe for the first Close: a command that does nothing.
		require.NoError(t, bus.Handle(b, func(context.Context, *echo) (struct{}, error) { return struct{}{}, nil }))
	})
	require.NoError(t, n.bus.Send(e.ctx, &block{}))
	<-started
	first := make(chan error, 1)
	go func() { first <- n.bus.Close() }()
	require.Eventually(t, func() bool {
		return errors.Is(n.bus.Send(e.ctx, &echo{}), bus.ErrClosed)
	}, waitFor, time.Millisecond, "the first Close to begin")
	require.NoError(t, n.bus.Close())
	require.True(t, returned.Load(), "the second Close returned before the handler")
	require.NoError(t, <-first)
}

// A handler that ends its goroutine with runtime.Goexit (t.FailNow, say)
// answers its sender with an error, acks, and frees its worker slot.
func checkGoexit(e *env) {
	t := e.t
	n := e.node(bus.Config{HandlerConcurrency: 1}, func(b *bus.Bus) {
		require.NoError(t, bus.Handle(b, func(context.Context, *exit) (int, error) {
			runtime.Goexit()
			return 0, nil
		}))
		require.NoError(t, bus.Handle(b, func(_ context.Context, c *echo) (string, error) { return c.Text, nil }))
	})
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	for range 3 {
		_, err := bus.Dispatch[int](ctx, n.bus, &exit{})
		var remote *middleware.RemoteError
		require.ErrorAs(t, err, &remote, "an answer, not a timeout: %v", err)
		require.Contains(t, remote.Message, "runtime.Goexit")
	}
	got, err := bus.Dispatch[string](ctx, n.bus, &echo{Text: "still serving"})
	require.NoError(t, err)
	require.Equal(t, "still serving", got)
	require.Zero(t, n.bus.Pending())
	n.requireAllAcked(t, 4)
}

// holdSlow holds each slow command in its BeforeDispatch until release
// gives it a turn, deaf to its context; held says when one is held, and
// ended gets its run's error once its handler returned or was skipped.
func holdSlow(release <-chan struct{}, held chan<- int, ended chan<- error) middleware.Middleware {
	after := func(_ context.Context, p *middleware.Pipeline) {
		if _, ok := p.Command.(*slow); ok {
			offer(ended, p.Err())
		}
	}
	return middleware.Hooks{
		OnBeforeDispatch: func(_ context.Context, p *middleware.Pipeline) {
			if c, ok := p.Command.(*slow); ok {
				offer(held, c.ID)
				<-release
			}
		},
		OnAfterDispatch: after,
		OnAfterFailure:  after,
	}
}

// A Dispatch whose ctx ran out before its handler started: the handler
// does not start, since the deadline travels with the command, and the
// hooks' context ends at it. A handler that started before the deadline
// runs to its end.
func checkDeadlineSkipsHandler(e *env) {
	t := e.t
	release, held, ended := make(chan struct{}), make(chan int, 1), make(chan error, 1)
	var mu sync.Mutex
	var waited context.Context
	var handled []int
	cfg := bus.Config{Middleware: []middleware.Middleware{
		middleware.Hooks{OnBeforeDispatch: func(ctx context.Context, _ *middleware.Pipeline) {
			mu.Lock()
			waited = ctx
			mu.Unlock()
		}},
		holdSlow(release, held, ended),
	}}
	n := e.node(cfg, func(b *bus.Bus) {
		require.NoError(t, bus.Handle(b, func(_ context.Context, c *slow) (int, error) {
			mu.Lock()
			handled = append(handled, c.ID)
			mu.Unlock()
			return c.ID, nil
		}))
	})
	defer close(release)

	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	_, err := bus.Dispatch[int](ctx, n.bus, &slow{ID: 1})
	require.ErrorIs(t, err, context.DeadlineExceeded)
	<-held
	release <- struct{}{}
	require.ErrorIs(t, <-ended, context.DeadlineExceeded, "the handler was skipped")
	mu.Lock()
	require.Empty(t, handled)
	d, ok := waited.Deadline()
	mu.Unlock()
	require.True(t, ok, "the hooks' context ends at the sender's deadline")
	want, _ := ctx.Deadline()
	require.WithinDuration(t, want, d, time.Millisecond)

	type outcome struct {
		n   int
		err error
	}
	out := make(chan outcome, 1)
	go func() {
		v, err := bus.Dispatch[int](context.Background(), n.bus, &slow{ID: 2})
		out <- outcome{v, err}
	}()
	<-held
	release <- struct{}{}
	require.NoError(t, <-ended)
	require.Equal(t, outcome{2, nil}, <-out)
	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, []int{2}, handled)
}

// In process, a Dispatch whose caller went away (ctx cancelled, no
// deadline) before the handler started does not start it either. Over a
// transport only the deadline travels with the command.
func checkCancelSkipsHandler(e *env) {
	t := e.t
	release, held, ended := make(chan struct{}), make(chan int, 1), make(chan error, 1)
	var handled atomic.Int32
	n := e.node(bus.Config{Middleware: []middleware.Middleware{holdSlow(release, held, ended)}}, func(b *bus.Bus) {
		require.NoError(t, bus.Handle(b, func(_ context.Context, c *slow) (int, error) {
			handled.Add(1)
			return c.ID, nil
		}))
	})
	if !n.inProcess() {
		t.Log("bustest: over a transport a cancellation does not travel with the command: not tested")
		return
	}
	defer close(release)
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		_, err := bus.Dispatch[int](ctx, n.bus, &slow{ID: 1})
		errc <- err
	}()
	<-held
	cancel()
	require.ErrorIs(t, <-errc, context.Canceled)
	release <- struct{}{}
	require.ErrorIs(t, <-ended, context.Canceled, "the handler was skipped")
	require.Zero(t, handled.Load())
}

// Send is fire-and-forget: its ctx ending does not stop the command.
func checkSendOutlivesContext(e *env) {
	t := e.t
	release, held, ended := make(chan struct{}), make(chan int, 1), make(chan error, 1)
	handled := make(chan int, 1)
	n := e.node(bus.Config{Middleware: []middleware.Middleware{holdSlow(release, held, ended)}}, func(b *bus.Bus) {
		require.NoError(t, bus.Handle(b, func(_ context.Context, c *slow) (int, error) {
			handled <- c.ID
			return c.ID, nil
		}))
	})
	defer close(release)
	// The ctx bounds the hand-over (a publish that may create a table):
	// it ends once Send returned, before the handler runs.
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	require.NoError(t, n.bus.Send(ctx, &slow{ID: 3}))
	cancel()
	<-held
	<-ctx.Done()
	release <- struct{}{}
	require.NoError(t, <-ended)
	require.Equal(t, 3, <-handled)
}

type traceKey struct{}

// Metadata that Config.OnSend writes from the sender's ctx reaches the
// middleware of the handling bus, for Dispatch and for a command a handler
// dispatches.
func checkOnSend(e *env) {
	t := e.t
	seen := make(chan string, 2)
	cfg := bus.Config{
		OnSend: func(ctx context.Context, msg *message.Message) {
			if v, ok := ctx.Value(traceKey{}).(string); ok {
				msg.Metadata.Set("trace", v)
			}
		},
		Middleware: []middleware.Middleware{middleware.Hooks{OnBeforeDispatch: func(_ context.Context, p *middleware.Pipeline) {
			offer(seen, p.Metadata["trace"])
		}}},
	}
	n := e.node(cfg, func(b *bus.Bus) {
		require.NoError(t, bus.Handle(b, func(ctx context.Context, c *parent) (string, error) {
			return bus.Dispatch[string](context.WithValue(ctx, traceKey{}, "from-handler"), b, &inner{})
		}))
		require.NoError(t, bus.Handle(b, func(context.Context, *inner) (string, error) { return "inner", nil }))
	})
	got, err := bus.Dispatch[string](context.WithValue(t.Context(), traceKey{}, "from-caller"), n.bus, &parent{})
	require.NoError(t, err)
	require.Equal(t, "inner", got)
	require.Equal(t, "from-caller", <-seen)
	require.Equal(t, "from-handler", <-seen)
}

// Several nodes share each command topic: every command, dispatched or
// sent from any of them, is handled once, by one node, and every node
// handles some.
func checkHandledOnce(e *env) {
	t := e.t
	var mu sync.Mutex
	handled := map[int][]string{}
	reg := func(id string) func(b *bus.Bus) {
		return func(b *bus.Bus) {
			require.NoError(t, bus.Handle(b, func(_ context.Context, c *count) (string, error) {
				mu.Lock()
				handled[c.N] = append(handled[c.N], id)
				mu.Unlock()
				return id, nil
			}))
		}
	}
	var nodes []*node
	for _, id := range []string{"node-a", "node-b", "node-c"} {
		nodes = append(nodes, e.node(bus.Config{}, reg(id)))
	}
	const perNode = 40
	var wg sync.WaitGroup
	for i, n := range nodes {
		for j := range perNode {
			wg.Go(func() {
				ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
				defer cancel()
				if _, err := bus.Dispatch[string](ctx, n.bus, &count{N: i*perNode + j}); err != nil {
					t.Errorf("Dispatch: %v", err)
				}
			})
		}
	}
	// And some fire-and-forget ones.
	sent := len(nodes) * perNode
	for j := range perNode {
		require.NoError(t, nodes[0].bus.Send(e.ctx, &count{N: sent + j}))
	}
	wg.Wait()
	total := sent + perNode
	require.Eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(handled) == total
	}, waitFor, time.Millisecond, "every sent command to be handled")
	e.requireAcked(bus.DefaultCommandTopic(nodes[0].bus.CommandName(&count{})))
	for _, n := range nodes {
		require.NoError(t, n.bus.Close())
		n.requireAllAcked(t, 0)
	}
	mu.Lock()
	defer mu.Unlock()
	by := map[string]int{}
	for n, ids := range handled {
		require.Len(t, ids, 1, "command %d handled by %v", n, ids)
		by[ids[0]]++
	}
	require.Len(t, handled, total)
	require.Len(t, by, len(nodes), "every node handled some: %v", by)
}

// A command sent before any node handles its topic waits for the first
// one.
func checkWaitsForHandler(e *env) {
	t := e.t
	s := e.node(bus.Config{}, nil)
	require.NoError(t, s.bus.Send(e.ctx, &echo{Text: "early"}))
	got := make(chan string, 1)
	e.node(bus.Config{}, func(b *bus.Bus) {
		require.NoError(t, bus.Handle(b, func(_ context.Context, c *echo) (struct{}, error) {
			offer(got, c.Text)
			return struct{}{}, nil
		}))
	})
	require.Equal(t, "early", recv(t, got, "the early command to be handled"))
}

// A handler that never answers, as on a node that hangs or died before it
// acked (with Backend.Crash, its node crashes): after the ack deadline the
// command is delivered again, to any node, and the sender gets the reply
// of that second run.
func checkRedelivery(e *env) {
	t := e.t
	e.redeliverAfter = redeliverAfter
	release := make(chan struct{})
	defer close(release)
	var runs atomic.Int32
	hung := make(chan string, 1) // the node of the first run
	var ids [2]string            // set before the first Dispatch
	reg := func(i int) func(b *bus.Bus) {
		return func(b *bus.Bus) {
			require.NoError(t, bus.Handle(b, func(_ context.Context, c *block) (string, error) {
				if runs.Add(1) == 1 {
					hung <- ids[i]
					<-release // the first run hangs
					return "first", nil
				}
				return ids[i], nil
			}))
		}
	}
	ids[0] = e.node(bus.Config{}, reg(0)).id
	ids[1] = e.node(bus.Config{}, reg(1)).id
	s := e.node(bus.Config{}, nil)
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	type result struct {
		got string
		err error
	}
	done := make(chan result, 1)
	go func() {
		got, err := bus.Dispatch[string](ctx, s.bus, &block{ID: 1})
		done <- result{got, err}
	}()
	if e.be.Crash != nil {
		e.be.Crash(t, recv(t, hung, "the first run to start"))
	}
	r := recv(t, done, "the reply")
	require.NoError(t, r.err)
	require.Contains(t, ids[:], r.got, "the reply of the second run")
	require.EqualValues(t, 2, runs.Load())
}

// A Dispatch waiting for its reply when the transport loses its connection
// returns at once, unavailable with its outcome unknown, the rejection
// naming no server; nothing stays pending, and once the transport is back
// Dispatch works again.
func checkLoss(e *env) {
	t := e.t
	release := make(chan struct{})
	var releaseOnce sync.Once
	defer releaseOnce.Do(func() { close(release) })
	started := make(chan struct{}, 1)
	n := e.node(bus.Config{}, func(b *bus.Bus) {
		require.NoError(t, bus.Handle(b, func(_ context.Context, c *block) (int, error) {
			if c.ID == 1 {
				select {
				case started <- struct{}{}:
				default:
				}
				<-release
			}
			return c.ID, nil
		}))
	})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	errs := make(chan error, 1)
	go func() {
		_, err := bus.Dispatch[int](ctx, n.bus, &block{ID: 1})
		errs <- err
	}()
	select {
	case <-started:
	case <-ctx.Done():
		t.Fatal("the handler never started")
	}
	e.be.LoseConnection(t, n.id)
	select {
	case err := <-errs:
		require.ErrorIs(t, err, middleware.ErrUnavailable)
		require.ErrorIs(t, err, bus.ErrOutcomeUnknown)
		var rej *middleware.Rejection
		require.ErrorAs(t, err, &rej)
		require.Equal(t, middleware.CodeUnavailable, rej.Code)
		require.NotContains(t, rej.Message, "127.0.0.1", "the rejection tells nothing of the server")
	case <-ctx.Done():
		t.Fatal("the Dispatch waited until its deadline")
	}
	require.Zero(t, n.bus.Pending())
	releaseOnce.Do(func() { close(release) })

	require.Eventually(t, func() bool {
		dctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		got, err := bus.Dispatch[int](dctx, n.bus, &block{ID: 2})
		return err == nil && got == 2
	}, time.Minute, 10*time.Millisecond, "a round trip once the transport is back")
}

// recv receives from ch, failing t after waitFor (what names the wait).
func recv[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	return testwait.Recv(t, ch, waitFor, "%s", what)
}

// offer sends v on ch unless ch is full: a hook or handler run again by a
// transport that delivers a command twice does not block its bus (and so
// the check's end); the check fails on what it sees instead.
func offer[T any](ch chan<- T, v T) {
	select {
	case ch <- v:
	default:
	}
}
