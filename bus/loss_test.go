package bus_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"

	"github.com/claimbus/claimbus/bus"
	"github.com/claimbus/claimbus/middleware"
)

// lossyReplies is a reply subscriber that is a bus.LossNotifier: report
// calls the registered buses as a transport that lost its connection
// would.
type lossyReplies struct {
	message.Subscriber
	mu sync.Mutex
	fs map[int]func(error)
	n  int
}

func (l *lossyReplies) NotifyLoss(f func(error)) func() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.fs == nil {
		l.fs = map[int]func(error){}
	}
	id := l.n
	l.n++
	l.fs[id] = f
	return func() {
		l.mu.Lock()
		defer l.mu.Unlock()
		delete(l.fs, id)
	}
}

func (l *lossyReplies) registered() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.fs)
}

func (l *lossyReplies) report(cause error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, f := range l.fs {
		f(cause)
	}
}

// A Dispatch waiting for its reply when the transport reports a lost
// connection returns at once, unavailable with its outcome unknown, the
// cause kept; nothing stays pending, the late reply is dropped, and the
// next Dispatch waits for its reply as usual. Close unregisters the bus.
func TestDispatchFailsOnLoss(t *testing.T) {
	t.Parallel()
	ps := newGoChannel(t)
	replies := &lossyReplies{Subscriber: ps}
	release := make(chan struct{})
	var started, handled atomic.Int32
	b, err := bus.New(bus.Config{Publisher: ps, Subscriber: ps, ReplyPublisher: ps, ReplySubscriber: replies})
	require.NoError(t, err)
	require.NoError(t, bus.Handle(b, func(_ context.Context, c *Block) (int, error) {
		started.Add(1)
		if c.ID == 1 {
			<-release
		}
		handled.Add(1)
		return c.ID, nil
	}))
	require.NoError(t, b.Start(context.Background()))
	require.Equal(t, 1, replies.registered())

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	errs := make(chan error, 1)
	go func() {
		_, err := bus.Dispatch[int](ctx, b, &Block{ID: 1})
		errs <- err
	}()
	eventually(t, func() bool { return started.Load() == 1 }, "the handler runs")
	cause := errors.New("the connection dropped")
	replies.report(cause)
	select {
	case err := <-errs:
		require.ErrorIs(t, err, middleware.ErrUnavailable)
		require.ErrorIs(t, err, middleware.ErrOutcomeUnknown)
		require.ErrorIs(t, err, cause)
		var rej *middleware.Rejection
		require.ErrorAs(t, err, &rej)
		require.NotContains(t, rej.Message, cause.Error(), "the rejection is for people")
	case <-ctx.Done():
		t.Fatal("the Dispatch still waits after the loss")
	}
	require.Zero(t, b.Pending())

	// The handler that ran on goes to its end; its reply is dropped.
	close(release)
	eventually(t, func() bool { return handled.Load() == 1 }, "the blocked handler finishes")
	got, err := bus.Dispatch[int](ctx, b, &Block{ID: 2})
	require.NoError(t, err)
	require.Equal(t, 2, got)
	replies.report(cause) // nobody waits: nothing happens
	require.Zero(t, b.Pending())

	require.NoError(t, b.Close())
	require.Zero(t, replies.registered(), "Close unregisters")
}
