package bustest

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/claimbus/claimbus/bus"
	"github.com/claimbus/claimbus/middleware"
)

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
