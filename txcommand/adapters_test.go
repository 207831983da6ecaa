package txcommand_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	wsql "github.com/ThreeDotsLabs/watermill-sql/v4/pkg/sql"
	"github.com/ThreeDotsLabs/watermill/components/cqrs"
	"github.com/ThreeDotsLabs/watermill/components/requestreply"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"

	"github.com/claimbus/claimbus/bus"
	"github.com/claimbus/claimbus/bus/bustest"
	"github.com/claimbus/claimbus/commands"
	"github.com/claimbus/claimbus/lockstore/postgres"
	"github.com/claimbus/claimbus/middleware"
)

// TestOnTheBusAndTheCQRSProcessor: the middleware works the same under
// the bus and under a Watermill cqrs processor's OnHandle: the handler
// writes in the command's transaction, a second command for the email is
// refused, and the sender gets the typed rejection.
func TestOnTheBusAndTheCQRSProcessor(t *testing.T) {
	dsn := newDB(t)
	e := newNode(t, dsn, "node-a", fullConfig())
	m := mustNew(t, e)
	ctx := context.Background()
	write := func(ctx context.Context, c *commands.CreateStaff) (string, error) {
		tx, ok := postgres.TxFrom(ctx)
		if !ok {
			return "", errors.New("no transaction in the handler's ctx")
		}
		_, err := tx.Exec(ctx, "INSERT INTO staff_events (id, email) VALUES ($1, $2)", c.StaffID, c.Email)
		return c.StaffID, err
	}

	t.Run("bus", func(t *testing.T) {
		b := bustest.StartBus(t, bus.Config{Middleware: []middleware.Middleware{m}}, func(b *bus.Bus) {
			require.NoError(t, bus.Handle(b, write))
		})
		id, err := bus.Dispatch[string](ctx, b, &commands.CreateStaff{StaffID: "s-bus", Email: "bus@x.org", Name: "N"})
		require.NoError(t, err)
		require.Equal(t, "s-bus", id)
		_, err = bus.Dispatch[string](ctx, b, &commands.CreateStaff{StaffID: "s-bus2", Email: "bus@x.org", Name: "N"})
		bustest.RequireRejection(t, err, middleware.CodeAlreadyTaken, "email")
	})

	t.Run("cqrs OnHandle", func(t *testing.T) {
		app := bustest.NewCQRS(t, bustest.CQRSOptions[string]{
			Middleware: func(bustest.Stores) ([]middleware.Middleware, error) { return []middleware.Middleware{m}, nil },
			Handlers: func(rr *middleware.RequestReply[string]) []cqrs.CommandHandler {
				return []cqrs.CommandHandler{requestreply.NewCommandHandlerWithResult("create", rr, write)}
			},
		})
		reply, err := app.Send(ctx, &commands.CreateStaff{StaffID: "s-cqrs", Email: "cqrs@x.org", Name: "N"})
		require.NoError(t, err)
		require.NoError(t, reply.Error)
		require.Equal(t, "s-cqrs", reply.HandlerResult)
		reply, err = app.Send(ctx, &commands.CreateStaff{StaffID: "s-cqrs2", Email: "cqrs@x.org", Name: "N"})
		require.NoError(t, err)
		bustest.RequireRejection(t, reply.Error, middleware.CodeAlreadyTaken, "email")
	})
	var n int
	require.NoError(t, e.pool.QueryRow(ctx, "SELECT count(*) FROM staff_events").Scan(&n))
	require.Equal(t, 2, n)
}

// TestOutbox: a handler publishes its event with Watermill's SQL
// publisher on the command's transaction; a subscriber gets the events of
// the commands that committed, each once, and none of those that rolled
// back.
func TestOutbox(t *testing.T) {
	dsn := newDB(t)
	e := newNode(t, dsn, "node-a", fullConfig())
	ctx := context.Background()
	logger := watermill.NopLogger{}
	sub, err := wsql.NewSubscriber(wsql.BeginnerFromPgx(e.pool), wsql.SubscriberConfig{
		SchemaAdapter:    wsql.DefaultPostgreSQLSchema{},
		OffsetsAdapter:   wsql.DefaultPostgreSQLOffsetsAdapter{},
		InitializeSchema: true,
		PollInterval:     10 * time.Millisecond,
	}, logger)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, sub.Close()) })
	require.NoError(t, sub.SubscribeInitialize("staff_registered"))
	msgs, err := sub.Subscribe(ctx, "staff_registered")
	require.NoError(t, err)

	publishing := func(fail bool) middleware.HandlerFunc {
		return func(ctx context.Context, p *middleware.Pipeline) (any, error) {
			if _, err := register(ctx, p); err != nil {
				return nil, err
			}
			tx, _ := postgres.TxFrom(ctx)
			pub, err := wsql.NewPublisher(wsql.TxFromPgx(tx), wsql.PublisherConfig{SchemaAdapter: wsql.DefaultPostgreSQLSchema{}}, logger)
			if err != nil {
				return nil, err
			}
			if err := pub.Publish("staff_registered", message.NewMessage(p.CommandUUID, []byte(`{"staff":"`+p.CommandUUID+`"}`))); err != nil {
				return nil, err
			}
			if fail {
				return nil, errors.New("rolled back after publishing")
			}
			return nil, nil
		}
	}
	want := map[string]bool{}
	for i := range 10 {
		id := fmt.Sprintf("o%d", i)
		_, err := e.send(ctx, id, id+"@x.org", publishing(i%3 == 0))
		if i%3 == 0 {
			require.Error(t, err)
			continue
		}
		require.NoError(t, err)
		want[id] = true
	}
	// The last command commits after every other: once its event is
	// delivered, every earlier committed one was.
	_, err = e.send(ctx, "last", "last@x.org", publishing(false))
	require.NoError(t, err)
	got := map[string]int{}
	for {
		select {
		case msg := <-msgs:
			got[msg.UUID]++
			msg.Ack()
			if msg.UUID != "last" {
				continue
			}
		case <-time.After(20 * time.Second):
			t.Fatalf("the last event never came; got %v", got)
		}
		break
	}
	delete(got, "last")
	for id := range want {
		require.Equal(t, 1, got[id], "event %s delivered once", id)
	}
	require.Len(t, got, len(want), "no event of a rolled-back command: %v", got)
}
