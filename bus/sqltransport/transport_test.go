package sqltransport_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	wsql "github.com/ThreeDotsLabs/watermill-sql/v4/pkg/sql"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/claimbus/claimbus/bus"
	"github.com/claimbus/claimbus/bus/sqltransport"
	"github.com/claimbus/claimbus/internal/pgtest"
	"github.com/claimbus/claimbus/middleware"
)

type (
	Echo   struct{ Text string }
	Fail   struct{ Why string }
	Taken  struct{ Email string }
	Broken struct{}
	Count  struct{ N int }
	Block  struct{ ID int }
	Write  struct{ Email string }
	Parent struct{}
	Child  struct{}
)

func (*Broken) UnmarshalJSON([]byte) error { return errors.New("broken on purpose") }

var takenMiddleware = middleware.Hooks{OnBeforeDispatch: func(_ context.Context, p *middleware.Pipeline) {
	if _, ok := p.Command.(*Taken); ok {
		p.Halt(middleware.Reject(middleware.CodeAlreadyTaken, "email", "email is already taken"))
	}
}}

func registerRoundTrip(t testing.TB) func(b *bus.Bus) {
	return func(b *bus.Bus) {
		require.NoError(t, bus.Handle(b, func(_ context.Context, c *Echo) (string, error) { return c.Text, nil }))
		require.NoError(t, bus.Handle(b, func(_ context.Context, c *Fail) (string, error) {
			return "", errors.New("failed: " + c.Why)
		}))
		require.NoError(t, bus.Handle(b, func(_ context.Context, c *Taken) (string, error) {
			t.Errorf("the handler of a halted command ran")
			return "", nil
		}))
		require.NoError(t, bus.Handle(b, func(_ context.Context, c *Broken) (string, error) {
			t.Errorf("the handler of an undecodable command ran")
			return "", nil
		}))
	}
}

// checkRoundTrip dispatches from sender to a node that registered
// registerRoundTrip's handlers.
func checkRoundTrip(t *testing.T, sender *bus.Bus) {
	ctx := context.Background()
	got, err := bus.Dispatch[string](ctx, sender, &Echo{Text: "hello"})
	require.NoError(t, err)
	require.Equal(t, "hello", got)

	_, err = bus.Dispatch[string](ctx, sender, &Fail{Why: "boom"})
	var remote *middleware.RemoteError
	require.ErrorAs(t, err, &remote)
	require.Equal(t, "failed: boom", remote.Message)

	got, err = bus.Dispatch[string](ctx, sender, &Taken{Email: "ann@x.org"})
	require.Empty(t, got)
	require.ErrorIs(t, err, middleware.ErrAlreadyTaken)
	var rej *middleware.Rejection
	require.ErrorAs(t, err, &rej)
	require.Equal(t, "email", rej.Field)

	_, err = bus.Dispatch[string](ctx, sender, &Broken{})
	require.ErrorIs(t, err, middleware.ErrInvalid)
	require.ErrorContains(t, err, "broken on purpose")
	require.Zero(t, sender.Pending())
}

func TestRoundTripOneNode(t *testing.T) {
	t.Parallel()
	for _, notify := range []bool{true, false} {
		t.Run(fmt.Sprintf("notify=%v", notify), func(t *testing.T) {
			t.Parallel()
			n := newNode(t, pgtest.DSN(t), "solo", sqltransport.Config{DisableNotify: !notify},
				bus.Config{Middleware: []middleware.Middleware{takenMiddleware}}, registerRoundTrip(t))
			checkRoundTrip(t, n.bus)
			// Every command was acked (deleted); the replies were handed
			// over in process, so the reply table was never used.
			for _, topic := range []string{"command.sqltransport_test.Echo", "command.sqltransport_test.Fail", "command.sqltransport_test.Taken", "command.sqltransport_test.Broken"} {
				eventually(t, func() bool { return rows(t, n.pool, topic) == 0 }, "the ack of "+topic)
			}
			require.Zero(t, rows(t, n.pool, "reply.solo"))
		})
	}
}

// Node A sends, node B handles, A gets the reply through its reply table.
func TestDispatchAcrossTwoNodes(t *testing.T) {
	t.Parallel()
	dsn := pgtest.DSN(t)
	b := newNode(t, dsn, "node-b", sqltransport.Config{}, bus.Config{Middleware: []middleware.Middleware{takenMiddleware}}, registerRoundTrip(t))
	a := newNode(t, dsn, "node-a", sqltransport.Config{}, bus.Config{}, nil)
	checkRoundTrip(t, a.bus)
	require.Zero(t, b.bus.Pending())
	eventually(t, func() bool { return rows(t, a.pool, "reply.node-a") == 0 }, "the replies to be acked")
}

func TestEachCommandHandledOnceAcrossNodes(t *testing.T) {
	t.Parallel()
	dsn := pgtest.DSN(t)
	var mu sync.Mutex
	handled := map[int][]string{}
	reg := func(id string) func(b *bus.Bus) {
		return func(b *bus.Bus) {
			require.NoError(t, bus.Handle(b, func(_ context.Context, c *Count) (string, error) {
				mu.Lock()
				handled[c.N] = append(handled[c.N], id)
				mu.Unlock()
				return id, nil
			}))
		}
	}
	a := newNode(t, dsn, "node-a", sqltransport.Config{}, bus.Config{}, reg("node-a"))
	b := newNode(t, dsn, "node-b", sqltransport.Config{}, bus.Config{}, reg("node-b"))

	const perNode = 40
	var wg sync.WaitGroup
	for i, n := range []*node{a, b} {
		for j := range perNode {
			wg.Go(func() {
				ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
				defer cancel()
				if _, err := bus.Dispatch[string](ctx, n.bus, &Count{N: i*perNode + j}); err != nil {
					t.Errorf("Dispatch: %v", err)
				}
			})
		}
	}
	// And some fire-and-forget ones.
	for j := range perNode {
		require.NoError(t, a.bus.Send(context.Background(), &Count{N: 2*perNode + j}))
	}
	wg.Wait()
	eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(handled) == 3*perNode
	}, "every sent command to be handled")
	eventually(t, func() bool { return rows(t, a.pool, "command.sqltransport_test.Count") == 0 }, "every command to be acked")
	require.NoError(t, a.bus.Close())
	require.NoError(t, b.bus.Close())
	mu.Lock()
	defer mu.Unlock()
	for n, by := range handled {
		require.Len(t, by, 1, "command %d handled by %v", n, by)
	}
	require.Len(t, handled, 3*perNode)
}

func TestHandlerErrorAnsweredOnceNotRedelivered(t *testing.T) {
	t.Parallel()
	dsn := pgtest.DSN(t)
	var calls atomic.Int32
	b := newNode(t, dsn, "node-b", sqltransport.Config{}, bus.Config{}, func(b *bus.Bus) {
		require.NoError(t, bus.Handle(b, func(_ context.Context, c *Fail) (string, error) {
			calls.Add(1)
			return "", errors.New("no")
		}))
	})
	a := newNode(t, dsn, "node-a", sqltransport.Config{}, bus.Config{}, nil)
	_, err := bus.Dispatch[string](context.Background(), a.bus, &Fail{})
	require.ErrorContains(t, err, "no")
	// The command's row is deleted: acked, never to be delivered again.
	eventually(t, func() bool { return rows(t, b.pool, "command.sqltransport_test.Fail") == 0 }, "the ack")
	require.NoError(t, b.bus.Close())
	require.EqualValues(t, 1, calls.Load())
}

// The handler writes through its own pool, not the subscription's
// transaction, so its write is committed when the after hooks run.
func TestHandlerWritesCommitBeforeAfterHooks(t *testing.T) {
	t.Parallel()
	dsn := pgtest.DSN(t)
	app := pgtest.Connect(t, dsn, pgtest.PoolConfig{ApplicationName: "app"})
	_, err := app.Exec(context.Background(), `CREATE TABLE staff (email TEXT PRIMARY KEY)`)
	require.NoError(t, err)
	observer := pgtest.Connect(t, dsn, pgtest.PoolConfig{ApplicationName: "observer"})

	seenAfter := make(chan bool, 1)
	release := middleware.Hooks{OnAfterDispatch: func(ctx context.Context, p *middleware.Pipeline) {
		// What another node's lookup sees when the claim is released.
		var n int
		err := observer.QueryRow(ctx, `SELECT count(*) FROM staff WHERE email = $1`, p.Command.(*Write).Email).Scan(&n)
		seenAfter <- err == nil && n == 1
	}}
	n := newNode(t, dsn, "node-a", sqltransport.Config{}, bus.Config{Middleware: []middleware.Middleware{release}}, func(b *bus.Bus) {
		require.NoError(t, bus.Handle(b, func(ctx context.Context, c *Write) (string, error) {
			if _, ok := wsql.TxFromContext(ctx); ok {
				return "", errors.New("the handler got the subscription's transaction")
			}
			err := pgx.BeginFunc(ctx, app, func(tx pgx.Tx) error {
				_, err := tx.Exec(ctx, `INSERT INTO staff (email) VALUES ($1)`, c.Email)
				return err
			})
			return c.Email, err
		}))
	})
	got, err := bus.Dispatch[string](context.Background(), n.bus, &Write{Email: "ann@x.org"})
	require.NoError(t, err)
	require.Equal(t, "ann@x.org", got)
	require.True(t, <-seenAfter, "the handler's write was visible to another connection in the after hook")
}

// A handler that dispatches another command and waits for it: the child
// is delivered while the parent's subscription transaction is open, and
// the ids propagate.
func TestNestedDispatchAcrossNodes(t *testing.T) {
	t.Parallel()
	dsn := pgtest.DSN(t)
	type ids struct{ id, correlation, causation string }
	var mu sync.Mutex
	seen := map[string]ids{}
	record := middleware.Hooks{OnBeforeDispatch: func(_ context.Context, p *middleware.Pipeline) {
		mu.Lock()
		seen[p.CommandName] = ids{p.CommandUUID, p.CorrelationID, p.CausationID}
		mu.Unlock()
	}}
	reg := func(b *bus.Bus) {
		require.NoError(t, bus.Handle(b, func(ctx context.Context, _ *Parent) (string, error) {
			return bus.Dispatch[string](ctx, b, &Child{})
		}))
		require.NoError(t, bus.Handle(b, func(ctx context.Context, _ *Child) (string, error) {
			return "child done", nil
		}))
	}
	newNode(t, dsn, "node-b", sqltransport.Config{}, bus.Config{Middleware: []middleware.Middleware{record}}, reg)
	a := newNode(t, dsn, "node-a", sqltransport.Config{}, bus.Config{}, nil)

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	got, err := bus.Dispatch[string](middleware.WithIDs(ctx, middleware.IDs{CorrelationID: "flow-1"}), a.bus, &Parent{})
	require.NoError(t, err)
	require.Equal(t, "child done", got)
	mu.Lock()
	defer mu.Unlock()
	parent, child := seen["sqltransport_test.Parent"], seen["sqltransport_test.Child"]
	require.Equal(t, "flow-1", parent.correlation)
	require.Equal(t, "flow-1", child.correlation)
	require.Equal(t, parent.id, child.causation)
	_, err = uuid.Parse(child.id)
	require.NoError(t, err)
}

func TestTimeoutLeavesNothingPending(t *testing.T) {
	t.Parallel()
	dsn := pgtest.DSN(t)
	release := make(chan struct{})
	var handled atomic.Int32
	newNode(t, dsn, "node-b", sqltransport.Config{}, bus.Config{}, func(b *bus.Bus) {
		require.NoError(t, bus.Handle(b, func(_ context.Context, c *Block) (int, error) {
			if c.ID == 1 {
				<-release
			}
			handled.Add(1)
			return c.ID, nil
		}))
	})
	a := newNode(t, dsn, "node-a", sqltransport.Config{}, bus.Config{}, nil)

	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	_, err := bus.Dispatch[int](ctx, a.bus, &Block{ID: 1})
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.ErrorIs(t, err, middleware.ErrTimeout)
	var te *bus.TimeoutError
	require.ErrorAs(t, err, &te)
	require.ErrorContains(t, err, te.CommandID)
	require.Zero(t, a.bus.Pending())

	close(release)
	eventually(t, func() bool { return handled.Load() == 1 }, "the blocked handler")
	// The late reply arrives and is dropped (acked, deleted).
	eventually(t, func() bool { return rows(t, a.pool, "reply.node-a") == 0 }, "the late reply to be dropped")
	got, err := bus.Dispatch[int](context.Background(), a.bus, &Block{ID: 2})
	require.NoError(t, err)
	require.Equal(t, 2, got)
	require.Zero(t, a.bus.Pending())
}

// A row that is no command: logged, acked (deleted), never delivered again.
func TestUndecodableMessageIsDropped(t *testing.T) {
	t.Parallel()
	dsn := pgtest.DSN(t)
	var calls atomic.Int32
	n := newNode(t, dsn, "node-a", sqltransport.Config{}, bus.Config{PoisonTopic: "poison"}, func(b *bus.Bus) {
		require.NoError(t, bus.Handle(b, func(_ context.Context, c *Echo) (string, error) {
			calls.Add(1)
			return c.Text, nil
		}))
	})
	topic := "command.sqltransport_test.Echo"
	garbage := message.NewMessage(uuid.NewString(), []byte("not json"))
	garbage.Metadata.Set(middleware.MetadataCommandName, "sqltransport_test.Echo")
	require.NoError(t, n.tr.Publisher().Publish(topic, garbage))
	unknown := message.NewMessage(uuid.NewString(), []byte("{}"))
	require.NoError(t, n.tr.Publisher().Publish(topic, unknown))

	eventually(t, func() bool { return rows(t, n.pool, topic) == 0 }, "both to be acked")
	eventually(t, func() bool { return rows(t, n.pool, "poison") == 2 }, "both to be poisoned")
	var reasons []string
	r, err := n.pool.Query(context.Background(), `SELECT metadata->>'reason_poisoned' FROM "claimbus_poison" ORDER BY "offset"`)
	require.NoError(t, err)
	reasons, err = pgx.CollectRows(r, pgx.RowTo[string])
	require.NoError(t, err)
	require.Contains(t, reasons[0], "undecodable command sqltransport_test.Echo")
	require.Contains(t, reasons[1], `unknown command ""`)
	require.Zero(t, calls.Load())

	got, err := bus.Dispatch[string](context.Background(), n.bus, &Echo{Text: "still fine"})
	require.NoError(t, err)
	require.Equal(t, "still fine", got)
}

// Several nodes creating the same tables at once.
func TestSchemaInitConcurrent(t *testing.T) {
	t.Parallel()
	dsn := pgtest.DSN(t)
	pool := pgtest.Connect(t, dsn, pgtest.PoolConfig{MaxConns: 20})
	var wg sync.WaitGroup
	for i := range 8 {
		tr, err := sqltransport.New(context.Background(), pool, sqltransport.Config{NodeID: fmt.Sprintf("n%d", i), DisableNotify: true})
		require.NoError(t, err)
		t.Cleanup(func() { require.NoError(t, tr.Close()) })
		wg.Go(func() {
			for _, topic := range []string{"t1", "t2", "t3"} {
				if err := tr.Publisher().Publish(topic, message.NewMessage(uuid.NewString(), []byte("{}"))); err != nil {
					t.Errorf("publish: %v", err)
				}
			}
		})
	}
	wg.Wait()
	for _, topic := range []string{"t1", "t2", "t3"} {
		require.Equal(t, 8, rows(t, pool, topic))
	}
}

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		cfg  sqltransport.Config
		want []string
	}{
		{"valid", sqltransport.Config{NodeID: "node-1.eu:a_b"}, nil},
		{"every problem", sqltransport.Config{
			PollInterval: -1, ReplyPollInterval: -1, AckDeadline: -1, RetryInterval: -1,
			TablePrefix: "bad-prefix",
		}, []string{"NodeID is required", "PollInterval is negative", "ReplyPollInterval is negative",
			"AckDeadline is negative", "RetryInterval is negative", "TablePrefix"}},
		{"bad node id", sqltransport.Config{NodeID: "a$b c"}, []string{"invalid topic"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.cfg.Validate()
			if tt.want == nil {
				require.NoError(t, err)
				return
			}
			for _, w := range tt.want {
				require.ErrorContains(t, err, w)
			}
		})
	}
	_, err := sqltransport.New(context.Background(), nil, sqltransport.Config{NodeID: "x"})
	require.Error(t, err)
}

func TestSendAcrossNodes(t *testing.T) {
	t.Parallel()
	dsn := pgtest.DSN(t)
	got := make(chan string, 1)
	newNode(t, dsn, "node-b", sqltransport.Config{}, bus.Config{}, func(b *bus.Bus) {
		require.NoError(t, bus.Handle(b, func(_ context.Context, c *Echo) (struct{}, error) {
			got <- c.Text
			return struct{}{}, nil
		}))
	})
	a := newNode(t, dsn, "node-a", sqltransport.Config{}, bus.Config{}, nil)
	require.NoError(t, a.bus.Send(context.Background(), &Echo{Text: "fire"}))
	select {
	case s := <-got:
		require.Equal(t, "fire", s)
	case <-time.After(20 * time.Second):
		t.Fatal("the sent command was not handled")
	}
}

// The LISTEN connection dies with every other backend of the node; the
// transport polls meanwhile, reconnects, and dispatches go on working.
func TestListenerReconnects(t *testing.T) {
	t.Parallel()
	dsn := pgtest.DSN(t)
	newNode(t, dsn, "node-a", sqltransport.Config{RetryInterval: 20 * time.Millisecond, PollInterval: 50 * time.Millisecond},
		bus.Config{}, func(b *bus.Bus) {
			require.NoError(t, bus.Handle(b, func(_ context.Context, c *Echo) (string, error) { return c.Text, nil }))
		})
	other := newNode(t, dsn, "node-b", sqltransport.Config{}, bus.Config{}, nil)
	got, err := bus.Dispatch[string](context.Background(), other.bus, &Echo{Text: "before"})
	require.NoError(t, err)
	require.Equal(t, "before", got)

	killed, err := pgtest.TerminateBackends(context.Background(), dsn, "node-a")
	require.NoError(t, err)
	require.NotZero(t, killed)
	eventually(t, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		got, err := bus.Dispatch[string](ctx, other.bus, &Echo{Text: "after"})
		return err == nil && got == "after"
	}, "a dispatch after the backends were terminated")
	// Polling alone would pass the check above: node-a LISTENs again.
	eventually(t, func() bool {
		var n int
		err := other.pool.QueryRow(context.Background(), `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND application_name = 'node-a' AND query = 'LISTEN `+sqltransport.NotifyChannel+`'`).Scan(&n)
		return err == nil && n == 1
	}, "node-a's LISTEN connection to be back")
}

// With notifications, a subscription wakes when a message commits, not at
// its next poll: with an hour between polls, a Dispatch across two nodes
// (a command, then a reply) still comes back.
func TestNotifyWakesSubscriptions(t *testing.T) {
	t.Parallel()
	dsn := pgtest.DSN(t)
	cfg := sqltransport.Config{PollInterval: time.Hour}
	newNode(t, dsn, "node-b", cfg, bus.Config{}, func(b *bus.Bus) {
		require.NoError(t, bus.Handle(b, func(_ context.Context, c *Echo) (string, error) { return c.Text, nil }))
	})
	a := newNode(t, dsn, "node-a", cfg, bus.Config{}, nil)
	for i := range 3 {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		got, err := bus.Dispatch[string](ctx, a.bus, &Echo{Text: fmt.Sprint(i)})
		cancel()
		require.NoError(t, err)
		require.Equal(t, fmt.Sprint(i), got)
	}
}

func TestClosedTransport(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t, pgtest.PoolConfig{})
	tr, err := sqltransport.New(context.Background(), pool, sqltransport.Config{NodeID: "n"})
	require.NoError(t, err)
	require.NoError(t, tr.Close())
	require.NoError(t, tr.Close(), "Close is idempotent")
	require.ErrorIs(t, tr.Publisher().Publish("t", message.NewMessage(uuid.NewString(), nil)), sqltransport.ErrClosed)
	_, err = tr.Subscriber().Subscribe(context.Background(), "t")
	require.ErrorIs(t, err, sqltransport.ErrClosed)
	require.ErrorIs(t, err, bus.ErrClosed, "one meaning, one sentinel")
	// An invalid topic is refused before any SQL.
	tr2, err := sqltransport.New(context.Background(), pool, sqltransport.Config{NodeID: "m", DisableNotify: true})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, tr2.Close()) })
	err = tr2.Publisher().Publish(`bad"topic`, message.NewMessage(uuid.NewString(), nil))
	require.ErrorIs(t, err, sqltransport.ErrInvalidTopic)
	require.ErrorIs(t, err, bus.ErrInvalidTopic)
}

// Topics too long for a PostgreSQL identifier get distinct tables.
func TestLongTopics(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t, pgtest.PoolConfig{})
	tr, err := sqltransport.New(context.Background(), pool, sqltransport.Config{NodeID: "n"})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, tr.Close()) })
	long := "command." + strings.Repeat("x", 70)
	topics := []string{long + ".One", long + ".Two"}
	for _, topic := range topics {
		msg := message.NewMessage(uuid.NewString(), []byte(topic))
		require.NoError(t, tr.Publisher().Publish(topic, msg))
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for _, topic := range topics {
		ch, err := tr.Subscriber().Subscribe(ctx, topic)
		require.NoError(t, err)
		select {
		case msg := <-ch:
			require.Equal(t, topic, string(msg.Payload))
			msg.Ack()
		case <-time.After(20 * time.Second):
			t.Fatal("no message on", topic)
		}
	}
}
