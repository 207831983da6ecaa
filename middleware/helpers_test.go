package middleware_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/components/cqrs"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"
	"github.com/stretchr/testify/require"

	"github.com/claimbus/claimbus/middleware"
)

// waitTimeout bounds every wait of these tests; reaching it is a failure.
const waitTimeout = 10 * time.Second

// CreateStaff is the test command. Its name on the wire, as
// cqrs.JSONMarshaler names it, is "middleware_test.CreateStaff".
type CreateStaff struct {
	Email string `json:"email"`
}

const createStaffName = "middleware_test.CreateStaff"

// Validate fails for an email without "@".
func (c *CreateStaff) Validate() error {
	if !strings.Contains(c.Email, "@") {
		return &fieldErr{field: "email", msg: "email must contain @"}
	}
	return nil
}

// fieldErr is a validation error naming a field, the way a commands package
// with no import of claimbus writes one.
type fieldErr struct{ field, msg string }

func (e *fieldErr) Error() string { return e.msg }
func (e *fieldErr) Field() string { return e.field }

// StaffCreated is the result of CreateStaff.
type StaffCreated struct {
	ID string `json:"id"`
}

// discardLogger drops every record.
var discardLogger = slog.New(slog.NewTextHandler(io.Discard, nil))

// deliveries counts deliveries per message UUID, as a router middleware
// placed outermost.
type deliveries struct {
	mu sync.Mutex
	n  map[string]int
}

func newDeliveries() *deliveries { return &deliveries{n: map[string]int{}} }

func (d *deliveries) middleware(h message.HandlerFunc) message.HandlerFunc {
	return func(msg *message.Message) ([]*message.Message, error) {
		d.mu.Lock()
		d.n[msg.UUID]++
		d.mu.Unlock()
		return h(msg)
	}
}

func (d *deliveries) count(uuid string) int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.n[uuid]
}

// newPubSub returns a GoChannel whose Publish returns once the message is
// acked: a test that published knows the outcome is final (a nacked
// message is redelivered inside Publish).
func newPubSub(t *testing.T) *gochannel.GoChannel {
	t.Helper()
	ps := gochannel.NewGoChannel(gochannel.Config{BlockPublishUntilSubscriberAck: true}, watermill.NopLogger{})
	t.Cleanup(func() { require.NoError(t, ps.Close()) })
	return ps
}

// runRouter runs r until the test ends and returns once it is running.
func runRouter(t *testing.T, r *message.Router) {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- r.Run(context.Background()) }()
	t.Cleanup(func() {
		require.NoError(t, r.Close())
		require.NoError(t, <-done)
	})
	select {
	case <-r.Running():
	case <-time.After(waitTimeout):
		t.Fatal("router did not start")
	}
}

// newRouter returns a router with the delivery counter outermost.
func newRouter(t *testing.T, d *deliveries) *message.Router {
	t.Helper()
	r, err := message.NewRouter(message.RouterConfig{CloseTimeout: waitTimeout}, watermill.NopLogger{})
	require.NoError(t, err)
	r.AddMiddleware(d.middleware)
	return r
}

// publishAcked publishes msg and waits until it is acked.
func publishAcked(t *testing.T, pub message.Publisher, topic string, msg *message.Message) {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- pub.Publish(topic, msg) }()
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(waitTimeout):
		t.Fatalf("message %s was not acked: redelivered forever or never handled", msg.UUID)
	}
}

// commandMessage marshals cmd as a cqrs command bus would.
func commandMessage(t *testing.T, cmd any) *message.Message {
	t.Helper()
	msg, err := cqrs.JSONMarshaler{}.Marshal(cmd)
	require.NoError(t, err)
	return msg
}

// newRegistry returns a registry holding CreateStaff.
func newRegistry(t *testing.T) *middleware.Registry {
	t.Helper()
	reg := middleware.NewRegistry(nil)
	name, err := middleware.Register[CreateStaff](reg)
	require.NoError(t, err)
	require.Equal(t, createStaffName, name)
	return reg
}

// newRunner returns a runner of mws.
func newRunner(t *testing.T, mws ...middleware.Middleware) *middleware.Runner {
	t.Helper()
	r, err := middleware.NewRunner(middleware.RunnerConfig{Middleware: mws})
	require.NoError(t, err)
	return r
}

// results collects what a ResultFunc received.
type results struct {
	mu  sync.Mutex
	got []result
	// fail, when set, is returned by the ResultFunc on the first calls.
	failFirst int
}

type result struct {
	uuid      string
	res       any
	err       error
	pipeline  bool
	handled   bool
	ctxAlive  bool
	hasCancel bool
}

func (r *results) fn(ctx context.Context, msg *message.Message, res any, err error) error {
	p, ok := middleware.PipelineFromContext(ctx)
	_, hasDeadline := ctx.Deadline()
	r.mu.Lock()
	defer r.mu.Unlock()
	got := result{res: res, err: err, pipeline: ok, ctxAlive: ctx.Err() == nil, hasCancel: hasDeadline}
	if msg != nil {
		got.uuid = msg.UUID
	}
	if ok {
		got.handled = middleware.Handled(p)
	}
	r.got = append(r.got, got)
	if len(r.got) <= r.failFirst {
		return errors.New("reply transport down")
	}
	return nil
}

func (r *results) list() []result {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]result(nil), r.got...)
}
