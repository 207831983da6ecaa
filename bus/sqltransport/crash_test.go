package sqltransport_test

import (
	"context"
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/claimbus/claimbus/bus"
	"github.com/claimbus/claimbus/bus/bustest"
	"github.com/claimbus/claimbus/bus/sqltransport"
	"github.com/claimbus/claimbus/internal/pgtest"
)

// requestTimeout is the deadline of the dispatches of these tests: the
// example app's request timeout (app.DefaultRequestTimeout).
const requestTimeout = 20 * time.Second

type Block struct{ ID int }

// crashDialer dials a node's connections; crash cuts them at once
// (nothing more is written, nothing acked or handed back) and refuses
// every later dial, as for a process that died.
type crashDialer struct {
	mu    sync.Mutex
	conns []net.Conn
	dead  bool
}

func (d *crashDialer) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.dead {
		return nil, errors.New("crashDialer: the node crashed")
	}
	var nd net.Dialer
	c, err := nd.DialContext(ctx, network, addr)
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
		_ = c.Close()
	}
}

// newCrashableNode is newNode on a pool whose connections crash with the
// returned dialer.
func newCrashableNode(t *testing.T, dsn, id string, reg func(b *bus.Bus)) *crashDialer {
	t.Helper()
	pc, err := pgxpool.ParseConfig(dsn)
	require.NoError(t, err)
	d := &crashDialer{}
	pc.ConnConfig.DialFunc = d.dial
	pc.ConnConfig.RuntimeParams["application_name"] = id
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	tr, err := sqltransport.New(ctx, pool, sqltransport.Config{NodeID: id})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, tr.Close()) })
	bustest.StartBus(t, tr.BusConfig(bus.Config{}), reg)
	return d
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
// AckDeadline (30s, longer than the request's deadline): its lease runs
// out, another node handles the command and the sender gets that answer
// within the request's deadline, not a timeout.
func TestCrashedNodesCommandAnsweredWithinItsDeadline(t *testing.T) {
	t.Parallel()
	dsn := pgtest.DSN(t)
	started := make(chan struct{})
	release := make(chan struct{})
	defer close(release)
	x := newCrashableNode(t, dsn, "node-x", func(b *bus.Bus) {
		require.NoError(t, bus.Handle(b, func(_ context.Context, c *Block) (string, error) {
			close(started)
			<-release
			return "node-x", nil
		}))
	})
	a := newNode(t, dsn, "node-a", sqltransport.Config{}, bus.Config{}, nil)
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
	newNode(t, dsn, "node-b", sqltransport.Config{}, bus.Config{}, func(b *bus.Bus) {
		require.NoError(t, bus.Handle(b, func(_ context.Context, c *Block) (string, error) { return "node-b", nil }))
	})
	x.crash()
	crashed := time.Now()
	r := await(t, done, "answer")
	require.NoError(t, r.err)
	require.Equal(t, "node-b", r.got)
	t.Logf("answered by node-b %v after node-x crashed", time.Since(crashed).Round(time.Millisecond))
	eventually(t, func() bool { return rows(t, a.pool, "command."+a.bus.CommandName(&Block{})) == 0 }, "the ack of node-b")
}

// A handler that runs several leases on a node that lives is not
// delivered again meanwhile: its node renews the lease while it holds the
// command, until AckDeadline.
func TestSlowHandlerOutlivesItsLease(t *testing.T) {
	t.Parallel()
	dsn := pgtest.DSN(t)
	const ackDeadline = 900 * time.Millisecond // a lease of 300ms
	// A short poll: a lease that ran out would be seen at once.
	cfg := sqltransport.Config{AckDeadline: ackDeadline, PollInterval: 20 * time.Millisecond}
	var runs atomic.Int32
	reg := func(id string) func(*bus.Bus) {
		return func(b *bus.Bus) {
			require.NoError(t, bus.Handle(b, func(_ context.Context, c *Block) (string, error) {
				runs.Add(1)
				// The handler's work: two leases, the condition under
				// test, not a wait for something to happen.
				<-time.After(2 * ackDeadline / 3)
				return id, nil
			}))
		}
	}
	newNode(t, dsn, "node-b", cfg, bus.Config{}, reg("node-b"))
	newNode(t, dsn, "node-c", cfg, bus.Config{}, reg("node-c"))
	a := newNode(t, dsn, "node-a", cfg, bus.Config{}, nil)
	ctx, cancel := context.WithTimeout(context.Background(), requestTimeout)
	defer cancel()
	_, err := bus.Dispatch[string](ctx, a.bus, &Block{ID: 1})
	require.NoError(t, err)
	require.EqualValues(t, 1, runs.Load(), "one run")
	eventually(t, func() bool { return rows(t, a.pool, "command."+a.bus.CommandName(&Block{})) == 0 }, "the ack")
}

// Three nodes share a storm of commands; node a crashes (its connections
// cut, nothing acked) while its handlers hold some of them, then starts
// again under the same name. Every command is answered within its
// deadline, the ones a held by b or c once their lease ran out; each runs
// once on a live node; the restarted a handles and sends commands again;
// nothing is left in the table.
func TestThreeNodesCrashAndRestart(t *testing.T) {
	t.Parallel()
	dsn := pgtest.DSN(t)
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
	dialer := newCrashableNode(t, dsn, "a", func(b *bus.Bus) {
		require.NoError(t, bus.Handle(b, func(_ context.Context, c *Block) (string, error) {
			// Node a takes commands and never finishes them: it crashes.
			held.Add(1)
			<-release
			return "a", nil
		}))
	})
	nodes := []*node{
		newNode(t, dsn, "b", sqltransport.Config{}, bus.Config{}, live("b")),
		newNode(t, dsn, "c", sqltransport.Config{}, bus.Config{}, live("c")),
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
	a2 := newNode(t, dsn, "a", sqltransport.Config{}, bus.Config{}, live("a"))
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
	topic := "command." + a2.bus.CommandName(&Block{})
	eventually(t, func() bool { return rows(t, a2.pool, topic) == 0 }, "every command of "+topic+" acked")
}
