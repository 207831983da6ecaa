package bus_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"

	"github.com/claimbus/claimbus/bus"
	"github.com/claimbus/claimbus/middleware"
)

// Slow is held in a BeforeDispatch hook (as behind a claim) until the test
// lets it go.
type Slow struct{ ID int }

// holdSlow holds each Slow in its BeforeDispatch until release gives it a
// turn, deaf to its context; held says when one is held, and ended gets
// its run's error once its handler returned or was skipped.
func holdSlow(release <-chan struct{}, held chan<- int, ended chan<- error) middleware.Middleware {
	after := func(_ context.Context, p *middleware.Pipeline) {
		if _, ok := p.Command.(*Slow); ok {
			ended <- p.Err()
		}
	}
	return middleware.Hooks{
		OnBeforeDispatch: func(_ context.Context, p *middleware.Pipeline) {
			if c, ok := p.Command.(*Slow); ok {
				held <- c.ID
				<-release
			}
		},
		OnAfterDispatch: after,
		OnAfterFailure:  after,
	}
}

// A Dispatch whose ctx ran out before the command's handler started: the
// handler does not start (the sender has given up on the outcome), in
// every mode, since the deadline travels with the command. The hooks' own
// waits end at it too.
func TestDispatchDeadlineSkipsHandler(t *testing.T) {
	t.Parallel()
	inEachMode(t, func(t *testing.T, cfg bus.Config) {
		release, held, ended := make(chan struct{}), make(chan int, 1), make(chan error, 1)
		var waited context.Context
		cfg.Middleware = []middleware.Middleware{
			middleware.Hooks{OnBeforeDispatch: func(ctx context.Context, _ *middleware.Pipeline) { waited = ctx }},
			holdSlow(release, held, ended),
		}
		var handled []int
		b := startBus(t, cfg, func(b *bus.Bus) {
			require.NoError(t, bus.Handle(b, func(_ context.Context, c *Slow) (int, error) {
				handled = append(handled, c.ID)
				return c.ID, nil
			}))
		})
		defer close(release)

		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		defer cancel()
		_, err := bus.Dispatch[int](ctx, b, &Slow{ID: 1})
		require.ErrorIs(t, err, context.DeadlineExceeded)
		<-held
		release <- struct{}{}
		require.ErrorIs(t, <-ended, context.DeadlineExceeded, "the handler was skipped")
		require.Empty(t, handled)
		d, ok := waited.Deadline()
		require.True(t, ok, "the hooks' context ends at the sender's deadline")
		want, _ := ctx.Deadline()
		require.WithinDuration(t, want, d, time.Millisecond)

		// A command whose handler started before the deadline runs to its
		// end; without a deadline nothing changes.
		type outcome struct {
			n   int
			err error
		}
		out := make(chan outcome, 1)
		go func() {
			n, err := bus.Dispatch[int](context.Background(), b, &Slow{ID: 2})
			out <- outcome{n, err}
		}()
		<-held
		release <- struct{}{}
		require.NoError(t, <-ended)
		require.Equal(t, outcome{2, nil}, <-out)
		require.Equal(t, []int{2}, handled)
	})
}

// In process, a Dispatch whose caller went away (ctx cancelled, no
// deadline) before the handler started does not start it either.
func TestDispatchCancelSkipsHandlerInProcess(t *testing.T) {
	t.Parallel()
	release, held, ended := make(chan struct{}), make(chan int, 1), make(chan error, 1)
	var handled int
	b := startBus(t, bus.Config{Middleware: []middleware.Middleware{holdSlow(release, held, ended)}}, func(b *bus.Bus) {
		require.NoError(t, bus.Handle(b, func(_ context.Context, c *Slow) (int, error) {
			handled++
			return c.ID, nil
		}))
	})
	defer close(release)

	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		_, err := bus.Dispatch[int](ctx, b, &Slow{ID: 1})
		errc <- err
	}()
	<-held
	cancel()
	require.ErrorIs(t, <-errc, context.Canceled)
	release <- struct{}{}
	require.ErrorIs(t, <-ended, context.Canceled, "the handler was skipped")
	require.Zero(t, handled)
}

// Send is fire-and-forget: its ctx ending does not stop the command.
func TestSendOutlivesItsContext(t *testing.T) {
	t.Parallel()
	inEachMode(t, func(t *testing.T, cfg bus.Config) {
		release, held, ended := make(chan struct{}), make(chan int, 1), make(chan error, 1)
		cfg.Middleware = []middleware.Middleware{holdSlow(release, held, ended)}
		handled := make(chan int, 1)
		b := startBus(t, cfg, func(b *bus.Bus) {
			require.NoError(t, bus.Handle(b, func(_ context.Context, c *Slow) (int, error) {
				handled <- c.ID
				return c.ID, nil
			}))
		})
		defer close(release)
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
		require.NoError(t, b.Send(ctx, &Slow{ID: 3}))
		<-held
		<-ctx.Done()
		cancel()
		release <- struct{}{}
		require.NoError(t, <-ended)
		require.Equal(t, 3, <-handled)
	})
}

// slowPublisher is a Publisher whose Publish waits until the message's
// context ends, then fails, as a first publish creating its topic's table
// on a slow database does.
type slowPublisher struct{ message.Publisher }

func (p slowPublisher) Publish(_ string, msgs ...*message.Message) error {
	<-msgs[0].Context().Done()
	return fmt.Errorf("creating the topic: %w", msgs[0].Context().Err())
}

// A deadline that passes while the command is being published is a
// timeout too: a *TimeoutError matching middleware.ErrTimeout, naming the
// command, with nothing left pending.
func TestDeadlineDuringPublishIsATimeout(t *testing.T) {
	t.Parallel()
	ps := newGoChannel(t)
	b := startBus(t, bus.Config{Publisher: slowPublisher{ps}, Subscriber: ps, ReplyPublisher: ps, ReplySubscriber: ps}, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	_, err := bus.Dispatch[string](ctx, b, &Echo{Text: "x"})
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.ErrorIs(t, err, middleware.ErrTimeout)
	var te *bus.TimeoutError
	require.ErrorAs(t, err, &te)
	require.ErrorContains(t, err, te.CommandID)
	require.Zero(t, b.Pending())
}
