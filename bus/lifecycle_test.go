package bus_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/claimbus/claimbus/bus"
	"github.com/claimbus/claimbus/middleware"
)

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	ps := newGoChannel(t)
	tests := []struct {
		name string
		cfg  bus.Config
		want []string
	}{
		{"zero is valid", bus.Config{}, nil},
		{"transport", bus.Config{Publisher: ps, Subscriber: ps, ReplyPublisher: ps, ReplySubscriber: ps, PoisonTopic: "p"}, nil},
		{"publisher alone", bus.Config{Publisher: ps}, []string{"Publisher and Subscriber must be set together"}},
		{"reply subscriber alone", bus.Config{Publisher: ps, Subscriber: ps, ReplySubscriber: ps}, []string{"ReplyPublisher and ReplySubscriber must be set together"}},
		{"replies without commands", bus.Config{ReplyPublisher: ps, ReplySubscriber: ps}, []string{"need Publisher and Subscriber"}},
		{"every problem at once", bus.Config{
			Subscriber:         ps,
			PoisonTopic:        "p",
			Middleware:         []middleware.Middleware{nil},
			ReleaseTimeout:     -1,
			HandlerConcurrency: -1,
			CloseTimeout:       -1,
		}, []string{
			"Publisher and Subscriber must be set together",
			"PoisonTopic needs a Publisher",
			"Middleware[0] is nil",
			"ReleaseTimeout is negative",
			"HandlerConcurrency is negative",
			"CloseTimeout is negative",
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := bus.New(tt.cfg)
			if tt.want == nil {
				require.NoError(t, err)
				return
			}
			for _, w := range tt.want {
				require.ErrorContains(t, err, w)
			}
		})
	}
}

func TestCloseBeforeStart(t *testing.T) {
	t.Parallel()
	b, err := bus.New(bus.Config{})
	require.NoError(t, err)
	require.NoError(t, b.Close())
}

func TestNoHandlerInProcess(t *testing.T) {
	t.Parallel()
	b := startBus(t, bus.Config{}, nil)
	_, err := bus.Dispatch[struct{}](context.Background(), b, &Orphan{})
	require.ErrorIs(t, err, bus.ErrNoHandler)
	require.ErrorContains(t, err, "bus_test.Orphan")
	require.ErrorIs(t, b.Send(context.Background(), &Orphan{}), bus.ErrNoHandler)
}

// HandlerConcurrency bounds the handlers running at once; a Send waits for
// a free slot until its ctx ends.
func TestHandlerConcurrencyBound(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	started := make(chan int, 10)
	b := startBus(t, bus.Config{HandlerConcurrency: 2}, func(b *bus.Bus) {
		require.NoError(t, bus.Handle(b, func(_ context.Context, c *Block) (int, error) {
			started <- c.ID
			<-release
			return c.ID, nil
		}))
	})
	require.NoError(t, b.Send(context.Background(), &Block{ID: 1}))
	require.NoError(t, b.Send(context.Background(), &Block{ID: 2}))
	<-started
	<-started
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	err := b.Send(ctx, &Block{ID: 3})
	require.ErrorIs(t, err, middleware.ErrTimeout)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	_, err = bus.Dispatch[int](ctx, b, &Block{ID: 4})
	require.ErrorIs(t, err, middleware.ErrTimeout)
	require.Zero(t, b.Pending())
	close(release)
	got, err := bus.Dispatch[int](context.Background(), b, &Block{ID: 5})
	require.NoError(t, err)
	require.Equal(t, 5, got)
	require.Len(t, started, 1, "only commands 1, 2 and 5 ran")
}
