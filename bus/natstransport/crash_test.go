package natstransport_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/claimbus/claimbus/bus"
	"github.com/claimbus/claimbus/bus/internal/crashtest"
	"github.com/claimbus/claimbus/bus/natstransport"
	"github.com/claimbus/claimbus/internal/natstest"
	"github.com/claimbus/claimbus/internal/testwait"
)

// requestTimeout is the deadline of the dispatches of these tests.
const requestTimeout = crashtest.RequestTimeout

// crashable returns cfg with a dialer that crashes its node.
func crashable(cfg natstransport.Config) (natstransport.Config, *crashtest.Dialer) {
	d := &crashtest.Dialer{}
	cfg.NatsOptions = append(cfg.NatsOptions, nats.SetCustomDialer(d))
	return cfg, d
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
	testwait.Recv(t, started, requestTimeout, "start of the handler on node-x")
	newNode(t, srv.URL(), "node-b", natstransport.Config{}, bus.Config{}, func(b *bus.Bus) {
		require.NoError(t, bus.Handle(b, func(_ context.Context, c *Block) (string, error) { return "node-b", nil }))
	})
	dialer.Crash()
	crashed := time.Now()
	r := testwait.Recv(t, done, requestTimeout, "answer")
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

// Three nodes share a storm of commands; node a crashes while its
// handlers hold some of them, then starts again under the same name (see
// crashtest.CrashAndRestart); nothing is left in the stream.
func TestThreeNodesCrashAndRestart(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	in := inspect(t, srv.URL())
	var last *natstransport.Transport // the last node started
	crashtest.CrashAndRestart(t, crashtest.Cluster{
		Node: func(name string, d *crashtest.Dialer, reg func(*bus.Bus)) *bus.Bus {
			cfg := natstransport.Config{}
			if d != nil {
				cfg.NatsOptions = append(cfg.NatsOptions, nats.SetCustomDialer(d))
			}
			n := newNode(t, srv.URL(), name, cfg, bus.Config{}, reg)
			last = n.tr
			return n.bus
		},
		Settled: func(topic string) bool { return in.unsettled(last, topic) == 0 && in.stored(last, topic) == 0 },
	})
}
