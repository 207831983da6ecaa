package natstransport_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/claimbus/claimbus/bus"
	"github.com/claimbus/claimbus/bus/natstransport"
	"github.com/claimbus/claimbus/internal/natstest"
	"github.com/claimbus/claimbus/middleware"
)

// The NATS server stops: Dispatch and Send fail with an error matching
// middleware.ErrUnavailable, not a bus timeout (at once once the client
// knows the connection is down, within RequestTimeout when a publish races
// the loss). It starts again on the same port with the same store: the
// nodes reconnect, their consumers are there, and dispatches work again.
func TestServerStopAndRestart(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	cfg := natstransport.Config{RequestTimeout: time.Second}
	newNode(t, srv.URL(), "node-b", cfg, bus.Config{}, func(b *bus.Bus) {
		require.NoError(t, bus.Handle(b, func(_ context.Context, c *Echo) (string, error) { return c.Text, nil }))
	})
	a := newNode(t, srv.URL(), "node-a", cfg, bus.Config{}, nil)
	got, err := bus.Dispatch[string](context.Background(), a.bus, &Echo{Text: "before"})
	require.NoError(t, err)
	require.Equal(t, "before", got)

	srv.Stop()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, err = bus.Dispatch[string](ctx, a.bus, &Echo{Text: "down"})
	require.ErrorIs(t, err, middleware.ErrUnavailable)
	require.NotErrorIs(t, err, middleware.ErrTimeout, "it failed, it did not wait")
	var rej *middleware.Rejection
	require.ErrorAs(t, err, &rej)
	require.Equal(t, middleware.CodeUnavailable, rej.Code)
	require.NoError(t, ctx.Err())
	require.ErrorIs(t, a.bus.Send(ctx, &Echo{Text: "down"}), middleware.ErrUnavailable)
	require.Zero(t, a.bus.Pending())

	srv.Start()
	eventually(t, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		got, err := bus.Dispatch[string](ctx, a.bus, &Echo{Text: "after"})
		return err == nil && got == "after"
	}, "a dispatch after the restart")
}

// A command stored before the server restarts is handled after it, by a
// node that starts later: the stream is on disk.
func TestCommandSurvivesServerRestart(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	a := newNode(t, srv.URL(), "node-a", natstransport.Config{}, bus.Config{}, nil)
	require.NoError(t, a.bus.Send(context.Background(), &Echo{Text: "kept"}))
	srv.Stop()
	srv.Start()
	got := make(chan string, 1)
	newNode(t, srv.URL(), "node-b", natstransport.Config{}, bus.Config{}, func(b *bus.Bus) {
		require.NoError(t, bus.Handle(b, func(_ context.Context, c *Echo) (struct{}, error) {
			got <- c.Text
			return struct{}{}, nil
		}))
	})
	select {
	case s := <-got:
		require.Equal(t, "kept", s)
	case <-time.After(20 * time.Second):
		t.Fatal("the command stored before the restart was not handled")
	}
}

// New fails with an error matching middleware.ErrUnavailable when no
// server answers.
func TestNewWithoutServer(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	srv.Stop()
	_, err := natstransport.New(context.Background(), srv.URL(), natstransport.Config{NodeID: "n"})
	require.ErrorIs(t, err, middleware.ErrUnavailable)
}
