// Package crashtest holds what the transports' tests share to crash a
// node: a dialer whose connections can be cut at once, as for a process
// that died, and the three-node storm in which one node crashes and
// starts again.
package crashtest

import (
	"context"
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/claimbus/claimbus/bus"
	"github.com/claimbus/claimbus/internal/testwait"
)

// RequestTimeout is the deadline of the tests' dispatches: the example
// app's request timeout (app.DefaultRequestTimeout).
const RequestTimeout = 20 * time.Second

// Dialer dials a node's connections; Crash cuts them at once (nothing
// more is written, nothing acked or handed back) and refuses every later
// dial. Its zero value is ready to use.
type Dialer struct {
	mu    sync.Mutex
	conns []net.Conn
	dead  bool
}

// DialContext dials address, unless the node has crashed.
func (d *Dialer) DialContext(ctx context.Context, network, address string) (net.Conn, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.dead {
		return nil, errors.New("crashtest: the node crashed")
	}
	var nd net.Dialer
	c, err := nd.DialContext(ctx, network, address)
	if err == nil {
		d.conns = append(d.conns, c)
	}
	return c, err
}

// Dial is DialContext without a context, for nats.CustomDialer.
func (d *Dialer) Dial(network, address string) (net.Conn, error) {
	return d.DialContext(context.Background(), network, address)
}

// Crash cuts the node's connections and refuses its later dials.
func (d *Dialer) Crash() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.dead = true
	for _, c := range d.conns {
		_ = c.Close()
	}
}

// Block is the command of the storm.
type Block struct{ ID int }

// Cluster is what CrashAndRestart needs of a transport.
type Cluster struct {
	// Node starts a node named name on the shared server, its handlers
	// registered by reg, its connections dialed by d when d is not nil,
	// all closed when the test ends; it returns the node's bus.
	Node func(name string, d *Dialer, reg func(*bus.Bus)) *bus.Bus
	// Settled reports whether every message of topic was acked: none is
	// left stored or in flight. It runs on the test's goroutine, so it
	// may assert on t.
	Settled func(topic string) bool
}

// CrashAndRestart runs three nodes on one server through a storm of
// commands; node a crashes (its connections cut, nothing acked) while its
// handlers hold some of them, then starts again under the same name. It
// asserts that every command is answered within its deadline, the ones a
// held by b or c; that each runs once on a live node; that the restarted
// a handles and sends commands again; and that nothing is left.
func CrashAndRestart(t *testing.T, c Cluster) {
	t.Helper()
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
	dialer := &Dialer{}
	c.Node("a", dialer, func(b *bus.Bus) {
		require.NoError(t, bus.Handle(b, func(_ context.Context, c *Block) (string, error) {
			// Node a takes commands and never finishes them: it crashes.
			held.Add(1)
			<-release
			return "a", nil
		}))
	})
	nodes := []*bus.Bus{c.Node("b", nil, live("b")), c.Node("c", nil, live("c"))}

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
				ctx, cancel := context.WithTimeout(context.Background(), RequestTimeout)
				start := time.Now()
				got, err := bus.Dispatch[string](ctx, nodes[i%2], &Block{ID: i})
				cancel()
				out[i] = outcome{got, err, time.Since(start)}
			}
		})
	}
	require.Eventually(t, func() bool { return held.Load() >= 5 }, RequestTimeout, 5*time.Millisecond, "node a holds commands")
	dialer.Crash()
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
	a2 := c.Node("a", nil, live("a"))
	require.Eventually(t, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		got, err := bus.Dispatch[string](ctx, nodes[0], &Block{ID: commands + int(next.Add(1))})
		return err == nil && got == "a"
	}, RequestTimeout, 5*time.Millisecond, "the restarted node a handles a command")
	ctx, cancel := context.WithTimeout(context.Background(), RequestTimeout)
	defer cancel()
	got, err := bus.Dispatch[string](ctx, a2, &Block{ID: -1})
	require.NoError(t, err, "a dispatch from the restarted node a")
	require.Contains(t, []string{"a", "b", "c"}, got)
	topic := "command." + a2.CommandName(&Block{})
	testwait.Until(t, RequestTimeout, 5*time.Millisecond, func() bool { return c.Settled(topic) }, "every command of %s settled", topic)
}
