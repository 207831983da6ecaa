package sqltransport_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
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
				if err := tr.BusConfig(bus.Config{}).Publisher.Publish(topic, message.NewMessage(uuid.NewString(), []byte("{}"))); err != nil {
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
			WHERE datname = current_database() AND application_name = 'node-a' AND query = 'LISTEN claimbus_wake'`).Scan(&n)
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
	require.ErrorIs(t, tr.BusConfig(bus.Config{}).Publisher.Publish("t", message.NewMessage(uuid.NewString(), nil)), bus.ErrClosed)
	_, err = tr.BusConfig(bus.Config{}).Subscriber.Subscribe(context.Background(), "t")
	require.ErrorIs(t, err, bus.ErrClosed)
	require.ErrorIs(t, err, bus.ErrClosed, "one meaning, one sentinel")
	// An invalid topic is refused before any SQL.
	tr2, err := sqltransport.New(context.Background(), pool, sqltransport.Config{NodeID: "m", DisableNotify: true})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, tr2.Close()) })
	err = tr2.BusConfig(bus.Config{}).Publisher.Publish(`bad"topic`, message.NewMessage(uuid.NewString(), nil))
	require.ErrorIs(t, err, bus.ErrInvalidTopic)
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
		require.NoError(t, tr.BusConfig(bus.Config{}).Publisher.Publish(topic, msg))
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for _, topic := range topics {
		ch, err := tr.BusConfig(bus.Config{}).Subscriber.Subscribe(ctx, topic)
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
