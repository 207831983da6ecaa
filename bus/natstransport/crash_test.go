package natstransport_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/claimbus/claimbus/bus"
	"github.com/claimbus/claimbus/bus/natstransport"
	"github.com/claimbus/claimbus/internal/natstest"
)

// requestTimeout is the deadline of the dispatches of these tests: the
// example app's request timeout (app.DefaultRequestTimeout).
const requestTimeout = 20 * time.Second

// crashDialer is the dialer of a node that can crash: crash cuts its
// connections to the server at once (nothing more is written, nothing
// acked or handed back) and refuses every later dial, as for a process
// that died.
type crashDialer struct {
	mu    sync.Mutex
	conns []net.Conn
	dead  bool
}

func (d *crashDialer) Dial(network, address string) (net.Conn, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.dead {
		return nil, errors.New("crashDialer: the node crashed")
	}
	c, err := net.Dial(network, address)
	if err == nil {
		d.conns = append(d.conns, c)
	}
	return c, err
}

func (d *crashDialer) crash() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.dead = true
	for _, c := range d.conns {
		c.Close()
	}
}

// crashable returns cfg with a dialer that crashes its node.
func crashable(cfg natstransport.Config) (natstransport.Config, *crashDialer) {
	d := &crashDialer{}
	cfg.NatsOptions = append(cfg.NatsOptions, nats.SetCustomDialer(d))
	return cfg, d
}

// await waits for ch within requestTimeout.
func await[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(requestTimeout):
		t.Fatalf("no %s within %v", what, requestTimeout)
		panic("unreachable")
	}
}

// A node dies while its handler holds a command, with the default
// AckWait: another node handles the command and its sender gets that
// answer within the request's deadline, not a timeout.
func TestCrashedNodesCommandAnsweredWithinItsDeadline(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	started := make(chan struct{})
	release := make(chan struct{})
	defer close(release)
	xcfg, dialer := crashable(natstransport.Config{})
	newNode(t, srv.URL(), "node-x", xcfg, bus.Config{}, func(b *bus.Bus) {
		require.NoError(t, bus.Handle(b, func(_ context.Context, c *Block) (string, error) {
			close(started)
			<-release
			return "node-x", nil
		}))
	})
	a := newNode(t, srv.URL(), "node-a", natstransport.Config{}, bus.Config{}, nil)
	type result struct {
		got string
		err error
	}
	done := make(chan result, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), requestTimeout)
		defer cancel()
		got, err := bus.Dispatch[string](ctx, a.bus, &Block{ID: 1})
		done <- result{got, err}
	}()
	await(t, started, "start of the handler on node-x")
	newNode(t, srv.URL(), "node-b", natstransport.Config{}, bus.Config{}, func(b *bus.Bus) {
		require.NoError(t, bus.Handle(b, func(_ context.Context, c *Block) (string, error) { return "node-b", nil }))
	})
	dialer.crash()
	crashed := time.Now()
	r := await(t, done, "answer")
	require.NoError(t, r.err)
	require.Equal(t, "node-b", r.got)
	require.Less(t, time.Since(crashed), 7*time.Second, "back within AckWait (default 5 s) of the crash")
	t.Logf("answered by node-b %v after node-x crashed", time.Since(crashed).Round(time.Millisecond))
}

// A handler that runs several times AckWait on a node that lives is not
// delivered again meanwhile: its node renews the message while it holds
// it.
func TestSlowHandlerOutlivesAckWait(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	const ackWait = 300 * time.Millisecond
	cfg := natstransport.Config{AckWait: ackWait}
	var runs atomic.Int32
	reg := func(id string) func(*bus.Bus) {
		return func(b *bus.Bus) {
			require.NoError(t, bus.Handle(b, func(_ context.Context, c *Block) (string, error) {
				runs.Add(1)
				// The handler's work: longer than AckWait, the condition
				// under test, not a wait for something to happen.
				<-time.After(6 * ackWait)
				return id, nil
			}))
		}
	}
	b := newNode(t, srv.URL(), "node-b", cfg, bus.Config{}, reg("node-b"))
	newNode(t, srv.URL(), "node-c", cfg, bus.Config{}, reg("node-c"))
	a := newNode(t, srv.URL(), "node-a", cfg, bus.Config{}, nil)
	ctx, cancel := context.WithTimeout(context.Background(), requestTimeout)
	defer cancel()
	_, err := bus.Dispatch[string](ctx, a.bus, &Block{ID: 1})
	require.NoError(t, err)
	require.EqualValues(t, 1, runs.Load(), "one run")
	in := inspect(t, srv.URL())
	topic := "command." + a.bus.CommandName(&Block{})
	require.Equal(t, 1, in.delivered(b.tr, topic), "one delivery")
	eventually(t, func() bool { return in.unsettled(b.tr, topic) == 0 && in.stored(b.tr, topic) == 0 }, "the ack")
}

// Three nodes share a storm of commands; node a crashes (its connection
// cut, nothing acked) while its handlers hold some of them, then starts
// again under the same name. Every command is answered within its
// deadline, the ones a held by b or c; each runs once on a live node;
// the restarted a handles and sends commands again; nothing is left in
// the stream.
func TestThreeNodesCrashAndRestart(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	release := make(chan struct{})
	defer close(release)
	var (
		mu   sync.Mutex
		runs = map[int]int{} // command → runs on a live node
		held atomic.Int32    // commands node a holds
	)
	live := func(id string) func(*bus.Bus) {
		return func(b *bus.Bus) {
			require.NoError(t, bus.Handle(b, func(_ context.Context, c *Block) (string, error) {
				mu.Lock()
				runs[c.ID]++
				mu.Unlock()
				return id, nil
			}))
		}
	}
	acfg, dialer := crashable(natstransport.Config{})
	newNode(t, srv.URL(), "a", acfg, bus.Config{}, func(b *bus.Bus) {
		require.NoError(t, bus.Handle(b, func(_ context.Context, c *Block) (string, error) {
			// Node a takes commands and never finishes them: it crashes.
			held.Add(1)
			<-release
			return "a", nil
		}))
	})
	nodes := []*node{
		newNode(t, srv.URL(), "b", natstransport.Config{}, bus.Config{}, live("b")),
		newNode(t, srv.URL(), "c", natstransport.Config{}, bus.Config{}, live("c")),
	}

	const commands, senders = 300, 24
	type outcome struct {
		got     string
		err     error
		elapsed time.Duration
	}
	out := make([]outcome, commands)
	next := atomic.Int32{}
	var wg sync.WaitGroup
	for range senders {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= commands {
					return
				}
				ctx, cancel := context.WithTimeout(context.Background(), requestTimeout)
				start := time.Now()
				got, err := bus.Dispatch[string](ctx, nodes[i%2].bus, &Block{ID: i})
				cancel()
				out[i] = outcome{got, err, time.Since(start)}
			}
		})
	}
	eventually(t, func() bool { return held.Load() >= 5 }, "node a holds commands")
	dialer.crash()
	wg.Wait()

	var slowest time.Duration
	for i, o := range out {
		require.NoError(t, o.err, "command %d", i)
		require.Contains(t, []string{"b", "c"}, o.got, "command %d", i)
		slowest = max(slowest, o.elapsed)
	}
	mu.Lock()
	for i := range commands {
		require.Equal(t, 1, runs[i], "runs of command %d on b and c", i)
	}
	mu.Unlock()
	t.Logf("node a held %d commands when it crashed; the slowest answer took %v", held.Load(), slowest.Round(time.Millisecond))

	// Node a again, same name: it handles commands and sends them.
	a2 := newNode(t, srv.URL(), "a", natstransport.Config{}, bus.Config{}, live("a"))
	eventually(t, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		got, err := bus.Dispatch[string](ctx, nodes[0].bus, &Block{ID: commands + int(next.Add(1))})
		return err == nil && got == "a"
	}, "the restarted node a handles a command")
	ctx, cancel := context.WithTimeout(context.Background(), requestTimeout)
	defer cancel()
	got, err := bus.Dispatch[string](ctx, a2.bus, &Block{ID: -1})
	require.NoError(t, err, "a dispatch from the restarted node a")
	require.Contains(t, []string{"a", "b", "c"}, got)

	in := inspect(t, srv.URL())
	topic := "command." + a2.bus.CommandName(&Block{})
	eventually(t, func() bool { return in.unsettled(a2.tr, topic) == 0 && in.stored(a2.tr, topic) == 0 },
		fmt.Sprintf("every command of %s settled", topic))
}
