package sqltransport_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/claimbus/claimbus/bus"
	"github.com/claimbus/claimbus/bus/sqltransport"
	"github.com/claimbus/claimbus/internal/pgtest"
	"github.com/claimbus/claimbus/internal/testwait"
)

// sendBlocks sends commands Blocks, with ids 0 to n-1, from a node that
// handles none, and returns that node.
func sendBlocks(t *testing.T, dsn string, cfg sqltransport.Config, n int) *node {
	t.Helper()
	sender := newNode(t, dsn, "sender", cfg, bus.Config{}, nil)
	ctx, cancel := context.WithTimeout(context.Background(), requestTimeout)
	defer cancel()
	for i := range n {
		require.NoError(t, sender.bus.Send(ctx, &Block{ID: i}))
	}
	return sender
}

// A node that handles one command at a time finds 20 queued, each 50ms of
// work, with an AckDeadline of 300ms: the last would wait a second if the
// node leased them all at once and counted AckDeadline from then. It
// leases no more than it can take, and counts from the hand-over: each
// runs once.
func TestQueuedCommandsRunOnceOnABusyNode(t *testing.T) {
	t.Parallel()
	dsn := pgtest.DSN(t)
	cfg := sqltransport.Config{AckDeadline: 300 * time.Millisecond, PollInterval: 20 * time.Millisecond}
	const commands = 20
	sender := sendBlocks(t, dsn, cfg, commands)
	var (
		mu   sync.Mutex
		runs = map[int]int{}
	)
	worker := newNode(t, dsn, "worker", cfg, bus.Config{HandlerConcurrency: 1}, func(b *bus.Bus) {
		require.NoError(t, bus.Handle(b, func(_ context.Context, c *Block) (string, error) {
			mu.Lock()
			runs[c.ID]++
			mu.Unlock()
			<-time.After(50 * time.Millisecond) // the handler's work
			return "", nil
		}))
	})
	topic := "command." + sender.bus.CommandName(&Block{})
	eventually(t, func() bool { return rows(t, sender.pool, topic) == 0 }, "every command acked")
	require.NoError(t, worker.bus.Close()) // waits for the handlers
	mu.Lock()
	defer mu.Unlock()
	for i := range commands {
		require.Equal(t, 1, runs[i], "runs of command %d", i)
	}
	require.Len(t, runs, commands)
}

// A node whose one handler is stuck holds no more of the queued commands
// than it has taken (one running, one waiting for the handler, one offered):
// an idle node handles the others, long before AckDeadline.
func TestBusyNodeLeavesCommandsToAnIdleNode(t *testing.T) {
	t.Parallel()
	dsn := pgtest.DSN(t)
	cfg := sqltransport.Config{PollInterval: 20 * time.Millisecond}
	const commands, busyHolds = 10, 3
	sendBlocks(t, dsn, cfg, commands)
	release := make(chan struct{})
	defer close(release)
	started := make(chan struct{}, commands)
	newNode(t, dsn, "busy", cfg, bus.Config{HandlerConcurrency: 1}, func(b *bus.Bus) {
		require.NoError(t, bus.Handle(b, func(_ context.Context, c *Block) (string, error) {
			started <- struct{}{}
			<-release
			return "busy", nil
		}))
	})
	testwait.Recv(t, started, requestTimeout, "a command on the busy node")
	var idleRuns atomic.Int32
	newNode(t, dsn, "idle", cfg, bus.Config{}, func(b *bus.Bus) {
		require.NoError(t, bus.Handle(b, func(_ context.Context, c *Block) (string, error) {
			idleRuns.Add(1)
			return "idle", nil
		}))
	})
	eventually(t, func() bool { return idleRuns.Load() >= commands-busyHolds }, "the idle node handles what the busy one cannot take")
}
