package bustest

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"

	"github.com/claimbus/claimbus/bus"
	"github.com/claimbus/claimbus/internal/testwait"
	"github.com/claimbus/claimbus/middleware"
)

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
	e.requireAcked("command." + nodes[0].bus.CommandName(&count{}))
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
		require.ErrorIs(t, err, middleware.ErrOutcomeUnknown)
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
