package natstransport_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/claimbus/claimbus/bus"
	"github.com/claimbus/claimbus/bus/natstransport"
	"github.com/claimbus/claimbus/internal/natstest"
	"github.com/claimbus/claimbus/middleware"
)

// hookCount counts the BeforeDispatch calls of a bus's middleware.
type hookCount struct{ n atomic.Int32 }

func (h *hookCount) BeforeDispatch(context.Context, *middleware.Pipeline) { h.n.Add(1) }
func (h *hookCount) AfterDispatch(context.Context, *middleware.Pipeline)  {}
func (h *hookCount) AfterFailure(context.Context, *middleware.Pipeline)   {}

// A command whose sender's deadline has passed when a node receives it
// (it waited in the stream while no node handled its topic) is
// terminated: its handler does not run, nor its middleware (no claim, no
// lock), nobody gets a reply, and it is never delivered again.
func TestExpiredCommandTerminated(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	a := newNode(t, srv.URL(), "node-a", natstransport.Config{}, bus.Config{}, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	_, err := bus.Dispatch[string](ctx, a.bus, &Block{ID: 1})
	require.ErrorIs(t, err, middleware.ErrTimeout)

	var runs atomic.Int32
	hooks := &hookCount{}
	b := newNode(t, srv.URL(), "node-b", natstransport.Config{}, bus.Config{Middleware: []middleware.Middleware{hooks}}, func(b *bus.Bus) {
		require.NoError(t, bus.Handle(b, func(_ context.Context, c *Block) (string, error) {
			runs.Add(1)
			return "node-b", nil
		}))
	})
	in := inspect(t, srv.URL())
	topic := "command." + a.bus.CommandName(&Block{})
	eventually(t, func() bool {
		return in.delivered(b.tr, topic) == 1 && in.unsettled(b.tr, topic) == 0 && in.stored(b.tr, topic) == 0
	}, "the command delivered once and settled")
	require.Zero(t, runs.Load(), "the handler did not run")
	require.Zero(t, hooks.n.Load(), "the middleware did not run")
	// Node b works: a command within its deadline is handled.
	ctx, cancel = context.WithTimeout(context.Background(), requestTimeout)
	defer cancel()
	got, err := bus.Dispatch[string](ctx, a.bus, &Block{ID: 2})
	require.NoError(t, err)
	require.Equal(t, "node-b", got)
	require.Equal(t, 2, in.delivered(b.tr, topic), "the expired command was not delivered again")
	require.Equal(t, 1, in.delivered(a.tr, "reply.node-a"), "one reply to node-a: the second command's")
}
