package bus_test

import (
	"context"
	"errors"
	"runtime"
	"sync/atomic"
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
			err := tt.cfg.Validate()
			_, nerr := bus.New(tt.cfg)
			if tt.want == nil {
				require.NoError(t, err)
				require.NoError(t, nerr)
				return
			}
			require.Error(t, nerr)
			for _, w := range tt.want {
				require.ErrorContains(t, err, w)
			}
		})
	}
}

func TestLifecycle(t *testing.T) {
	t.Parallel()
	inEachMode(t, func(t *testing.T, cfg bus.Config) {
		b, err := bus.New(cfg)
		require.NoError(t, err)
		echo := func(_ context.Context, c *Echo) (string, error) { return c.Text, nil }
		require.NoError(t, bus.Handle(b, echo))
		require.ErrorIs(t, bus.Handle(b, echo), bus.ErrDuplicateHandler)
		require.Error(t, bus.Handle[Echo, string](b, nil))

		_, err = bus.Dispatch[string](context.Background(), b, &Echo{})
		require.ErrorIs(t, err, bus.ErrNotStarted)
		require.ErrorIs(t, b.Send(context.Background(), &Echo{}), bus.ErrNotStarted)

		require.NoError(t, b.Start(context.Background()))
		require.ErrorIs(t, b.Start(context.Background()), bus.ErrStarted)
		require.ErrorIs(t, bus.Handle(b, func(context.Context, *Fail) (string, error) { return "", nil }), bus.ErrStarted)
		_, err = bus.Dispatch[string](context.Background(), b, nil)
		require.ErrorIs(t, err, bus.ErrNilCommand)

		got, err := bus.Dispatch[string](context.Background(), b, &Echo{Text: "up"})
		require.NoError(t, err)
		require.Equal(t, "up", got)

		require.NoError(t, b.Close())
		require.NoError(t, b.Close(), "Close is idempotent")
		_, err = bus.Dispatch[string](context.Background(), b, &Echo{})
		require.ErrorIs(t, err, bus.ErrClosed)
		require.ErrorIs(t, b.Send(context.Background(), &Echo{}), bus.ErrClosed)
		require.ErrorIs(t, b.Start(context.Background()), bus.ErrClosed)
		require.Zero(t, b.Pending())
	})
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

func TestRun(t *testing.T) {
	t.Parallel()
	b, err := bus.New(bus.Config{})
	require.NoError(t, err)
	require.NoError(t, bus.Handle(b, func(_ context.Context, c *Echo) (string, error) { return c.Text, nil }))
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan error)
	go func() { ran <- b.Run(ctx) }()
	eventually(t, func() bool {
		_, err := bus.Dispatch[string](context.Background(), b, &Echo{})
		return err == nil
	}, "the bus to run")
	cancel()
	require.NoError(t, <-ran)
	_, err = bus.Dispatch[string](context.Background(), b, &Echo{})
	require.ErrorIs(t, err, bus.ErrClosed)
}

// A Dispatch waiting for a reply that cannot come gets ErrClosed at Close.
func TestCloseFailsPendingDispatch(t *testing.T) {
	t.Parallel()
	ps := newGoChannel(t)
	b := startBus(t, bus.Config{Publisher: ps, Subscriber: ps}, nil)
	done := make(chan error)
	go func() {
		_, err := bus.Dispatch[struct{}](context.Background(), b, &Orphan{})
		done <- err
	}()
	eventually(t, func() bool { return b.Pending() == 1 }, "the dispatch to wait")
	require.NoError(t, b.Close())
	select {
	case err := <-done:
		require.ErrorIs(t, err, bus.ErrClosed)
		require.ErrorContains(t, err, "bus_test.Orphan")
	case <-time.After(10 * time.Second):
		t.Fatal("Dispatch did not return at Close")
	}
	require.Zero(t, b.Pending())
}

// Close lets running handlers finish and reply; after CloseTimeout it
// cancels their context.
func TestCloseWaitsThenCancelsHandlers(t *testing.T) {
	t.Parallel()
	inEachMode(t, func(t *testing.T, cfg bus.Config) {
		started := make(chan struct{})
		cfg.CloseTimeout = 50 * time.Millisecond
		afterRan := make(chan error, 1)
		cfg.Middleware = []middleware.Middleware{middleware.Hooks{OnAfterFailure: func(ctx context.Context, p *middleware.Pipeline) {
			afterRan <- p.Err()
		}}}
		b := startBus(t, cfg, func(b *bus.Bus) {
			require.NoError(t, bus.Handle(b, func(ctx context.Context, _ *Block) (int, error) {
				close(started)
				<-ctx.Done()
				return 0, ctx.Err()
			}))
		})
		done := make(chan error)
		go func() {
			_, err := bus.Dispatch[int](context.Background(), b, &Block{})
			done <- err
		}()
		<-started
		require.NoError(t, b.Close())
		// The handler's answer reached the sender before Close returned.
		var remote *middleware.RemoteError
		require.ErrorAs(t, <-done, &remote)
		require.Equal(t, context.Canceled.Error(), remote.Message)
		require.ErrorIs(t, <-afterRan, context.Canceled, "the after hooks ran")
	})
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

// A Close that finds another Close under way waits for it: when it
// returns, every handler has returned.
func TestConcurrentCloseWaits(t *testing.T) {
	t.Parallel()
	inEachMode(t, func(t *testing.T, cfg bus.Config) {
		cfg.CloseTimeout = time.Second
		started := make(chan struct{})
		var returned atomic.Bool
		b := startBus(t, cfg, func(b *bus.Bus) {
			require.NoError(t, bus.Handle(b, func(ctx context.Context, _ *Block) (int, error) {
				close(started)
				<-ctx.Done() // cancelled by Close after CloseTimeout
				returned.Store(true)
				return 0, nil
			}))
		})
		require.NoError(t, b.Send(context.Background(), &Block{}))
		<-started
		first := make(chan error, 1)
		go func() { first <- b.Close() }()
		eventually(t, func() bool {
			return errors.Is(b.Send(context.Background(), &Block{}), bus.ErrClosed)
		}, "the first Close to begin")
		require.NoError(t, b.Close())
		require.True(t, returned.Load(), "the second Close returned before the handler")
		require.NoError(t, <-first)
	})
}

// A handler that ends its goroutine with runtime.Goexit (t.FailNow, say)
// answers its sender with an error, acks, and frees its worker slot.
func TestHandlerGoexit(t *testing.T) {
	t.Parallel()
	inEachMode(t, func(t *testing.T, cfg bus.Config) {
		cfg.HandlerConcurrency = 1
		b := startBus(t, cfg, func(b *bus.Bus) {
			require.NoError(t, bus.Handle(b, func(context.Context, *Block) (int, error) {
				runtime.Goexit()
				return 0, nil
			}))
			require.NoError(t, bus.Handle(b, func(_ context.Context, c *Echo) (string, error) { return c.Text, nil }))
		})
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		for range 3 {
			_, err := bus.Dispatch[int](ctx, b, &Block{})
			var remote *middleware.RemoteError
			require.ErrorAs(t, err, &remote, "an answer, not a timeout: %v", err)
			require.Contains(t, remote.Message, "runtime.Goexit")
		}
		got, err := bus.Dispatch[string](ctx, b, &Echo{Text: "still serving"})
		require.NoError(t, err)
		require.Equal(t, "still serving", got)
		require.Zero(t, b.Pending())
	})
}
