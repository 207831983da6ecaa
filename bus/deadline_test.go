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
		Before: func(_ context.Context, p *middleware.Pipeline) {
			if c, ok := p.Command.(*Slow); ok {
				held <- c.ID
				<-release
			}
		},
		AfterSuccess: after,
		AfterFail:    after,
	}
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
