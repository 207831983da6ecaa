package idempotency_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/components/cqrs"
	"github.com/ThreeDotsLabs/watermill/components/requestreply"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	claimpg "github.com/claimbus/claimbus/claimstore/postgres"
	"github.com/claimbus/claimbus/idempotency"
	"github.com/claimbus/claimbus/internal/pgtest"
	"github.com/claimbus/claimbus/lockstore/postgres"
	"github.com/claimbus/claimbus/middleware"
	"github.com/claimbus/claimbus/uniqueness"
)

// SignUp is the command of the requestreply tests: one staff per email,
// Key its idempotency key.
type SignUp struct {
	Email string `json:"email"`
	Key   string `json:"key"`
}

// SignedUp is SignUp's result.
type SignedUp struct {
	ID int64 `json:"id"`
}

// rrCluster is a cqrs app on n nodes answering requestreply senders: each
// node its own router, command processor, pool and PostgreSQL stores on
// one database, the pipeline plugged in with OnHandle; replies travel on
// one GoChannel. Commands go to the node the sender picks.
type rrCluster struct {
	pool     *pgxpool.Pool
	commands []*gochannel.GoChannel
	sender   *middleware.RequestReply[SignedUp]
	log      *recordLog

	mu       sync.Mutex
	failOnce map[string]bool   // emails whose next run fails
	after    map[string]string // command UUID: the after hook that ran
}

func startRRCluster(t *testing.T, nodes int, reserve, idempotent bool) *rrCluster {
	t.Helper()
	dsn := pgtest.DSN(t)
	c := &rrCluster{
		pool:     pgtest.Connect(t, dsn, pgtest.PoolConfig{MaxConns: 4}),
		log:      &recordLog{},
		failOnce: map[string]bool{},
		after:    map[string]string{},
	}
	_, err := c.pool.Exec(context.Background(), `CREATE TABLE staff (id bigserial PRIMARY KEY, email text NOT NULL)`)
	require.NoError(t, err)
	replies := gochannel.NewGoChannel(gochannel.Config{}, watermill.NopLogger{})
	t.Cleanup(func() { require.NoError(t, replies.Close()) })
	c.sender, err = middleware.NewRequestReply[SignedUp](rrBackendConfig(replies))
	require.NoError(t, err)
	for i := range nodes {
		c.startNode(t, dsn, fmt.Sprintf("node-%d", i), replies, reserve, idempotent)
	}
	return c
}

func (c *rrCluster) startNode(t *testing.T, dsn, name string, replies *gochannel.GoChannel, reserve, idempotent bool) {
	t.Helper()
	ctx := context.Background()
	pool := pgtest.Connect(t, dsn, pgtest.PoolConfig{MaxConns: 8, ApplicationName: name})
	locks, err := postgres.New(ctx, pool, postgres.Config{})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, locks.Close()) })
	claims, err := claimpg.New(ctx, pool, claimpg.Config{})
	require.NoError(t, err)

	var opts []uniqueness.Option
	if reserve {
		opts = append(opts, uniqueness.Reserve(claims, time.Minute))
	}
	uniq, err := uniqueness.New(uniqueness.Config{Locker: locks, Rules: []uniqueness.Rule{
		uniqueness.Field(uniqueness.Names{Field: "email", Scope: "staff.email"},
			func(s *SignUp) string { return s.Email }, c.emailTaken, opts...),
	}})
	require.NoError(t, err)
	mws := []middleware.Middleware{c.recorder()}
	if idempotent {
		idem, err := idempotency.New(idempotency.Config{
			Locker: locks, Store: claims, Retention: time.Hour,
			Key: func(p *middleware.Pipeline) string { return p.Command.(*SignUp).Key },
		})
		require.NoError(t, err)
		mws = append(mws, idem)
	}
	mws = append(mws, uniq)
	runner, err := middleware.NewRunner(middleware.RunnerConfig{
		Middleware: mws,
		FailureLog: middleware.FailureLog{Logger: slog.New(c.log)},
	})
	require.NoError(t, err)

	rr, err := middleware.NewRequestReply[SignedUp](rrBackendConfig(replies))
	require.NoError(t, err)
	handler := requestreply.NewCommandHandlerWithResult("sign_up", rr, c.signUp)
	onHandle, err := middleware.OnHandle(rr.HandlerConfig(runner, handler))
	require.NoError(t, err)
	commands := gochannel.NewGoChannel(gochannel.Config{}, watermill.NopLogger{})
	c.commands = append(c.commands, commands)
	router, err := message.NewRouter(message.RouterConfig{}, watermill.NopLogger{})
	require.NoError(t, err)
	proc, err := cqrs.NewCommandProcessorWithConfig(router, cqrs.CommandProcessorConfig{
		GenerateSubscribeTopic: func(cqrs.CommandProcessorGenerateSubscribeTopicParams) (string, error) { return "commands", nil },
		SubscriberConstructor: func(cqrs.CommandProcessorSubscriberConstructorParams) (message.Subscriber, error) {
			return commands, nil
		},
		Marshaler: cqrs.JSONMarshaler{},
		Logger:    watermill.NopLogger{},
		OnHandle:  onHandle,
	})
	require.NoError(t, err)
	require.NoError(t, proc.AddHandlers(handler))
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- router.Run(runCtx) }()
	t.Cleanup(func() {
		cancel()
		require.NoError(t, <-done)
		require.NoError(t, commands.Close())
	})
	select {
	case <-router.Running():
	case <-time.After(10 * time.Second):
		t.Fatal("the router did not start")
	}
}

// signUp is the handler: it inserts the staff row, unless the email is to
// fail once.
func (c *rrCluster) signUp(ctx context.Context, cmd *SignUp) (SignedUp, error) {
	c.mu.Lock()
	fail := c.failOnce[cmd.Email]
	delete(c.failOnce, cmd.Email)
	c.mu.Unlock()
	if fail {
		return SignedUp{}, errors.New("database down")
	}
	var res SignedUp
	err := c.pool.QueryRow(ctx, `INSERT INTO staff (email) VALUES ($1) RETURNING id`, cmd.Email).Scan(&res.ID)
	return res, err
}

func (c *rrCluster) emailTaken(ctx context.Context, email string) (bool, error) {
	var ok bool
	err := c.pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM staff WHERE email = $1)`, email).Scan(&ok)
	return ok, err
}

func (c *rrCluster) staff(t *testing.T, email string) int {
	t.Helper()
	var n int
	require.NoError(t, c.pool.QueryRow(context.Background(), `SELECT count(*) FROM staff WHERE email = $1`, email).Scan(&n))
	return n
}

// recorder notes which after hook ran for each command, outermost, so
// that it runs last.
func (c *rrCluster) recorder() middleware.Middleware {
	note := func(hook string) func(context.Context, *middleware.Pipeline) {
		return func(_ context.Context, p *middleware.Pipeline) {
			c.mu.Lock()
			c.after[p.CommandUUID] = hook
			c.mu.Unlock()
		}
	}
	return middleware.Hooks{OnAfterDispatch: note("AfterDispatch"), OnAfterFailure: note("AfterFailure")}
}

func (c *rrCluster) afterHook(uuid string) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.after[uuid]
}

// send sends cmd to node and waits for its reply; it returns the reply and
// the command's UUID.
func (c *rrCluster) send(t *testing.T, node int, cmd SignUp) (requestreply.Reply[SignedUp], string) {
	t.Helper()
	bus, err := cqrs.NewCommandBusWithConfig(c.commands[node], cqrs.CommandBusConfig{
		GeneratePublishTopic: func(cqrs.CommandBusGeneratePublishTopicParams) (string, error) { return "commands", nil },
		Marshaler:            cqrs.JSONMarshaler{},
	})
	require.NoError(t, err)
	var uuid string
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	reply, err := requestreply.SendWithReply[SignedUp](ctx, uuidBus{bus, &uuid}, c.sender, &cmd)
	require.NoError(t, err, "the sender must get an answer")
	return reply, uuid
}

// uuidBus is a requestreply.CommandBus that notes the UUID of the message
// it sends.
type uuidBus struct {
	bus  *cqrs.CommandBus
	uuid *string
}

func (b uuidBus) SendWithModifiedMessage(ctx context.Context, cmd any, modify func(*message.Message) error) error {
	return b.bus.SendWithModifiedMessage(ctx, cmd, func(m *message.Message) error {
		*b.uuid = m.UUID
		return modify(m)
	})
}

func rrBackendConfig(ps *gochannel.GoChannel) requestreply.PubSubBackendConfig {
	return requestreply.PubSubBackendConfig{
		Publisher: ps,
		SubscriberConstructor: func(requestreply.PubSubBackendSubscribeParams) (message.Subscriber, error) {
			return ps, nil
		},
		GeneratePublishTopic:   func(requestreply.PubSubBackendPublishParams) (string, error) { return "replies", nil },
		GenerateSubscribeTopic: func(requestreply.PubSubBackendSubscribeParams) (string, error) { return "replies", nil },
	}
}

// recordLog is a slog.Handler keeping every record's level, message and
// command id.
type recordLog struct {
	mu      sync.Mutex
	records []string
}

func (l *recordLog) Enabled(context.Context, slog.Level) bool { return true }
func (l *recordLog) WithAttrs([]slog.Attr) slog.Handler       { return l }
func (l *recordLog) WithGroup(string) slog.Handler            { return l }
func (l *recordLog) Handle(_ context.Context, r slog.Record) error {
	var id string
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == "command_id" {
			id = a.Value.String()
		}
		return true
	})
	l.mu.Lock()
	defer l.mu.Unlock()
	l.records = append(l.records, fmt.Sprintf("%s %s %s", r.Level, r.Message, id))
	return nil
}

func (l *recordLog) has(s string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, r := range l.records {
		if strings.Contains(r, s) {
			return true
		}
	}
	return false
}

// A handler that fails under requestreply takes the failure path on any
// node: the sender gets the error, AfterFailure runs (so a reservation is
// cancelled and no outcome is stored), the failure is logged, and the
// retry, on the other node, runs again and succeeds; a repeat of a stored
// success gets the first run's result.
func TestRequestReplyHandlerFailureOverTwoNodes(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name                string
		reserve, idempotent bool
	}{
		{name: "claims only"},
		{name: "reserved", reserve: true},
		{name: "idempotent", idempotent: true},
		{name: "reserved and idempotent", reserve: true, idempotent: true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c := startRRCluster(t, 2, tt.reserve, tt.idempotent)
			const email = "ann@x.org"
			c.failOnce[email] = true

			reply, uuid := c.send(t, 0, SignUp{Email: email, Key: "k1"})
			var rerr *middleware.RemoteError
			require.ErrorAs(t, reply.Error, &rerr)
			require.Equal(t, "database down", rerr.Message)
			require.Equal(t, "AfterFailure", c.afterHook(uuid), "a failed handler must take the failure path")
			require.True(t, c.log.has("ERROR command failed "+uuid), "the failure must be logged: %v", c.log.records)
			require.Zero(t, c.staff(t, email))

			retry, uuid := c.send(t, 1, SignUp{Email: email, Key: "k1"})
			require.NoError(t, retry.Error, "the retry must run again, not be refused nor answered as done")
			require.NotZero(t, retry.HandlerResult.ID)
			require.Equal(t, "AfterDispatch", c.afterHook(uuid))
			require.Equal(t, 1, c.staff(t, email))

			again, _ := c.send(t, 0, SignUp{Email: email, Key: "k1"})
			if tt.idempotent {
				require.NoError(t, again.Error)
				require.Equal(t, retry.HandlerResult, again.HandlerResult, "a repeat gets the stored result")
			} else {
				require.ErrorIs(t, again.Error, middleware.ErrAlreadyTaken)
			}
			other, _ := c.send(t, 1, SignUp{Email: email, Key: "k2"})
			require.ErrorIs(t, other.Error, middleware.ErrAlreadyTaken)
			require.Equal(t, 1, c.staff(t, email))
		})
	}
}
