package sqltransport_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/claimbus/claimbus/bus"
	"github.com/claimbus/claimbus/bus/bustest"
	"github.com/claimbus/claimbus/bus/internal/crashtest"
	"github.com/claimbus/claimbus/bus/sqltransport"
	"github.com/claimbus/claimbus/internal/pgtest"
	"github.com/claimbus/claimbus/internal/testwait"
)

// requestTimeout is the deadline of the dispatches of these tests.
const requestTimeout = crashtest.RequestTimeout

type Block struct{ ID int }

// newCrashableNode is newNode on a pool whose connections d dials, so
// that d.Crash crashes the node.
func newCrashableNode(t *testing.T, dsn, id string, d *crashtest.Dialer, reg func(b *bus.Bus)) *bus.Bus {
	t.Helper()
	pc, err := pgxpool.ParseConfig(dsn)
	require.NoError(t, err)
	pc.ConnConfig.DialFunc = d.DialContext
	pc.ConnConfig.RuntimeParams["application_name"] = id
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	tr, err := sqltransport.New(ctx, pool, sqltransport.Config{NodeID: id})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, tr.Close()) })
	return bustest.StartBus(t, tr.BusConfig(bus.Config{}), reg)
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
	x := &crashtest.Dialer{}
	newCrashableNode(t, dsn, "node-x", x, func(b *bus.Bus) {
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
	testwait.Recv(t, started, requestTimeout, "start of the handler on node-x")
	newNode(t, dsn, "node-b", sqltransport.Config{}, bus.Config{}, func(b *bus.Bus) {
		require.NoError(t, bus.Handle(b, func(_ context.Context, c *Block) (string, error) { return "node-b", nil }))
	})
	x.Crash()
	crashed := time.Now()
	r := testwait.Recv(t, done, requestTimeout, "answer")
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

// Three nodes share a storm of commands; node a crashes while its
// handlers hold some of them, then starts again under the same name (see
// crashtest.CrashAndRestart): the commands a held go to b or c once their
// lease ran out; nothing is left in the table.
func TestThreeNodesCrashAndRestart(t *testing.T) {
	t.Parallel()
	dsn := pgtest.DSN(t)
	observer := pgtest.Connect(t, dsn, pgtest.PoolConfig{MaxConns: 2, ApplicationName: "observer"})
	crashtest.CrashAndRestart(t, crashtest.Cluster{
		Node: func(name string, d *crashtest.Dialer, reg func(*bus.Bus)) *bus.Bus {
			if d != nil {
				return newCrashableNode(t, dsn, name, d, reg)
			}
			return newNode(t, dsn, name, sqltransport.Config{}, bus.Config{}, reg).bus
		},
		Settled: func(topic string) bool { return rows(t, observer, topic) == 0 },
	})
}
