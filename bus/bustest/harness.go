package bustest

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"

	"github.com/claimbus/claimbus/bus"
)

// Harness is one transport under test: how to make a backend, and what the
// transport promises beyond what every transport keeps. A capability the
// harness does not declare is not tested; Run says so with t.Log.
type Harness struct {
	// NewBackend makes one backend for the test t (a database, a broker,
	// a Pub/Sub), on which the suite makes every node of that test. What
	// it opens it closes with t.Cleanup. Required.
	NewBackend func(t testing.TB) Backend

	// MultiNode declares competing consumers: several nodes subscribing
	// to one command topic share it, each command handled by one of them.
	// A GoChannel delivers every message to every subscriber: not
	// MultiNode. (One node sending and another handling needs only a
	// shared backend, and is tested for every transport but in process.)
	MultiNode bool

	// Durable declares that a command sent while no node subscribes to its
	// topic waits for the first node that does.
	Durable bool

	// Redelivery declares at-least-once delivery: a command its handler
	// has not acked within NodeOptions.RedeliverAfter is delivered again,
	// to any node, and its sender gets the reply of that run; with
	// Backend.Crash, a command whose node crashed before it acked. Needs
	// MultiNode.
	Redelivery bool

	// LossNotifier declares that the ReplySubscriber is a bus.LossNotifier
	// and that Backend.LoseConnection makes it report a loss.
	LossNotifier bool

	// Only, when not empty, names the checks to run (the last element of
	// Run's subtest names, such as "LossNotifier"); the others are logged
	// as not run. For a costly backend that serves one check, such as a
	// database that really crashes.
	Only []string

	// Inspects declares that Backend.Unacked counts what a topic holds,
	// so that the suite checks every message it handles is acked on the
	// backend (deleted from a queue), not only on its Watermill message.
	Inspects bool
}

// Backend is one shared backend of a test.
type Backend struct {
	// Node returns cfg with the transport of one more node on this
	// backend set: Publisher and Subscriber, and ReplyPublisher,
	// ReplySubscriber and NodeID as the transport wants them (see
	// sqltransport.Transport.BusConfig); or cfg unchanged for an
	// in-process bus. opts.ID names the node, distinct within the test.
	// The transport is closed with t.Cleanup; the suite closes the bus
	// before it. Required.
	Node func(t testing.TB, cfg bus.Config, opts NodeOptions) bus.Config

	// LoseConnection makes the transport of node id lose its connection,
	// so that its ReplySubscriber reports the loss to its buses, and come
	// back on its own. Required with Harness.LossNotifier.
	LoseConnection func(t testing.TB, id string)

	// Crash, when set, makes the transport of node id die as a crashed
	// process would: its connection ends, and nothing it holds is acked,
	// nacked or handed back. The Redelivery check then crashes the node
	// whose handler hangs, for a transport whose live nodes keep the
	// commands they hold (renewing their ack deadline) however long their
	// handlers run.
	Crash func(t testing.TB, id string)

	// Unacked returns how many messages published to topic the backend
	// holds that are not acked yet (0 for a topic never published to).
	// Required with Harness.Inspects.
	Unacked func(t testing.TB, topic string) int
}

// NodeOptions are what the suite asks of one node's transport.
type NodeOptions struct {
	// ID names the node: a transport's node id, distinct within a test.
	ID string
	// RedeliverAfter, when set, is how long the transport waits for the ack
	// of a delivered command before it delivers it again (an ack deadline).
	// Every node of a test gets the same value. Set only with
	// Harness.Redelivery.
	RedeliverAfter time.Duration
}

// redeliverAfter is the NodeOptions.RedeliverAfter of the checks that set
// one.
const redeliverAfter = 300 * time.Millisecond

// checkDeadline bounds the Dispatch and Send calls of a check.
const checkDeadline = 2 * time.Minute

// waitFor bounds every wait of the suite for something that must happen.
const waitFor = 20 * time.Second

// Run runs the conformance suite against h, each check a parallel subtest.
func Run(t *testing.T, h Harness) {
	t.Helper()
	require.NotNil(t, h.NewBackend, "bustest: Harness.NewBackend is required")
	require.False(t, h.Redelivery && !h.MultiNode, "bustest: Harness.Redelivery needs MultiNode")
	for _, c := range checks {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			if len(h.Only) > 0 && !slices.Contains(h.Only, c.name) {
				t.Logf("bustest: not run: not in Harness.Only")
				return
			}
			if c.needs != nil {
				if missing := c.needs(h); missing != "" {
					t.Logf("bustest: not tested: the harness does not declare %s", missing)
					return
				}
			}
			ctx, cancel := context.WithTimeout(context.Background(), checkDeadline)
			t.Cleanup(cancel)
			e := &env{t: t, ctx: ctx, h: h, be: h.NewBackend(t)}
			require.NotNil(t, e.be.Node, "bustest: Backend.Node is required")
			require.False(t, h.LossNotifier && e.be.LoseConnection == nil, "bustest: Harness.LossNotifier needs Backend.LoseConnection")
			require.False(t, h.Inspects && e.be.Unacked == nil, "bustest: Harness.Inspects needs Backend.Unacked")
			c.run(e)
		})
	}
}

// check is one test of the suite.
type check struct {
	name string
	// needs returns the capability the check needs that h lacks, if any.
	needs func(h Harness) string
	run   func(e *env)
}

func needMultiNode(h Harness) string {
	if !h.MultiNode {
		return "MultiNode"
	}
	return ""
}

// env is the backend of one check and the nodes made on it.
type env struct {
	t *testing.T
	// ctx bounds the waits of the check that have no deadline of their
	// own, so that a transport that loses a message fails the check
	// instead of hanging it.
	ctx            context.Context
	h              Harness
	be             Backend
	redeliverAfter time.Duration

	mu sync.Mutex
	n  int
}

// node is one bus of a check, with the recorder of its command
// subscriptions.
type node struct {
	id  string
	bus *bus.Bus
	cfg bus.Config // with the transport's Publisher and Subscriber
	rec *recorder  // nil in process
}

// replyTopic is the topic n's bus receives its replies on: Config.ReplyTopic
// of its NodeID, "reply." and the node id by default.
func (n *node) replyTopic() string {
	if n.cfg.ReplyTopic != nil {
		return n.cfg.ReplyTopic(n.cfg.NodeID)
	}
	return "reply." + n.cfg.NodeID
}

// inProcess reports whether the backend's buses work in process, each on
// its own.
func (n *node) inProcess() bool { return n.cfg.Publisher == nil }

// config returns cfg with the transport of a new node set.
func (e *env) config(cfg bus.Config) (bus.Config, string) {
	e.t.Helper()
	e.mu.Lock()
	id := fmt.Sprintf("node-%c", 'a'+e.n)
	e.n++
	e.mu.Unlock()
	// The suite's rejections and handler errors are expected: not logged.
	cfg.FailureLog.Off = true
	cfg = e.be.Node(e.t, cfg, NodeOptions{ID: id, RedeliverAfter: e.redeliverAfter})
	return cfg, id
}

// node starts a node with the handlers reg registers; it is closed when
// the check ends.
func (e *env) node(cfg bus.Config, reg func(b *bus.Bus)) *node {
	e.t.Helper()
	cfg, id := e.config(cfg)
	n := &node{id: id, cfg: cfg}
	if cfg.Subscriber != nil {
		if cfg.ReplySubscriber == nil {
			cfg.ReplyPublisher, cfg.ReplySubscriber = cfg.Publisher, cfg.Subscriber
		}
		n.rec = &recorder{Subscriber: cfg.Subscriber}
		e.t.Cleanup(n.rec.wg.Wait)
		cfg.Subscriber = n.rec
	}
	n.bus = StartBus(e.t, cfg, reg)
	return n
}

// sender returns a node with no handler that sends to handler's, or
// handler itself in process.
func (e *env) sender(handler *node, cfg bus.Config) *node {
	if handler.inProcess() {
		return handler
	}
	return e.node(cfg, nil)
}

// requireAcked waits until the topics hold no unacked message, when the
// harness can tell.
func (e *env) requireAcked(topics ...string) {
	e.t.Helper()
	if !e.h.Inspects {
		return
	}
	for _, topic := range topics {
		require.Eventually(e.t, func() bool { return e.be.Unacked(e.t, topic) == 0 }, waitFor, 5*time.Millisecond,
			"the messages of %s to be acked", topic)
	}
}

// StartBus returns a started bus for cfg with the handlers reg registers
// (reg may be nil), closed when the test ends: a Cleanup registered after
// the transport's closes the bus first.
func StartBus(t testing.TB, cfg bus.Config, reg func(b *bus.Bus)) *bus.Bus {
	t.Helper()
	b, err := bus.New(cfg)
	require.NoError(t, err)
	if reg != nil {
		reg(b)
	}
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	require.NoError(t, b.Start(ctx))
	t.Cleanup(func() { require.NoError(t, b.Close()) })
	return b
}

// recorder wraps a command Subscriber and records the messages it hands
// out, so that a check sees whether each was acked or nacked.
type recorder struct {
	message.Subscriber
	mu   sync.Mutex
	msgs []*message.Message
	wg   sync.WaitGroup
}

// Subscribe subscribes to topic and records what the subscription hands
// out. Its goroutine ends with ctx or the subscription.
func (r *recorder) Subscribe(ctx context.Context, topic string) (<-chan *message.Message, error) {
	in, err := r.Subscriber.Subscribe(ctx, topic)
	if err != nil {
		return nil, err
	}
	out := make(chan *message.Message)
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		defer close(out)
		for {
			var msg *message.Message
			var ok bool
			select {
			case msg, ok = <-in:
				if !ok {
					return
				}
			case <-ctx.Done():
				return
			}
			r.mu.Lock()
			r.msgs = append(r.msgs, msg)
			r.mu.Unlock()
			select {
			case out <- msg:
			case <-ctx.Done():
				return
			}
		}
	}()
	return out, nil
}

// commands returns the command messages handed out so far (the recorder
// wraps the command subscriber only: replies never pass it).
func (r *recorder) commands() []*message.Message {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.msgs)
}

// requireAllAcked checks that every command message n's subscriptions
// handed out is acked, none nacked, and, with want > 0, that there were
// want of them, counted again once all are acked (a duplicate delivered
// later than that is not seen).
func (n *node) requireAllAcked(t testing.TB, want int) {
	t.Helper()
	if n.rec == nil {
		return
	}
	if want > 0 {
		require.Eventually(t, func() bool { return len(n.rec.commands()) >= want }, waitFor, time.Millisecond, "%d deliveries", want)
	}
	msgs := n.rec.commands()
	if want > 0 {
		require.Len(t, msgs, want, "delivered more than once")
	}
	for _, m := range msgs {
		select {
		case <-m.Acked():
		case <-m.Nacked():
			t.Fatalf("command message %s was nacked", m.UUID)
		case <-time.After(waitFor):
			t.Fatalf("command message %s was never acked", m.UUID)
		}
	}
	if want > 0 {
		require.Len(t, n.rec.commands(), want, "delivered more than once, by the time all were acked")
	}
}
