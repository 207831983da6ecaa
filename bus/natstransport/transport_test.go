package natstransport_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/claimbus/claimbus/bus"
	"github.com/claimbus/claimbus/bus/natstransport"
	"github.com/claimbus/claimbus/internal/natstest"
	"github.com/claimbus/claimbus/middleware"
)

type (
	Echo   struct{ Text string }
	Fail   struct{ Why string }
	Taken  struct{ Email string }
	Broken struct{}
	Count  struct{ N int }
	Block  struct{ ID int }
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

var roundTripTopics = []string{
	"command.natstransport_test.Echo", "command.natstransport_test.Fail",
	"command.natstransport_test.Taken", "command.natstransport_test.Broken",
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
	for _, memory := range []bool{false, true} {
		t.Run(fmt.Sprintf("memory=%v", memory), func(t *testing.T) {
			t.Parallel()
			srv := natstest.Start(t)
			n := newNode(t, srv.URL(), "solo", natstransport.Config{MemoryStorage: memory},
				bus.Config{Middleware: []middleware.Middleware{takenMiddleware}}, registerRoundTrip(t))
			checkRoundTrip(t, n.bus)
			// Every command was acked, so deleted from the work queue; the
			// replies were handed over in process, so the reply subject was
			// never used.
			in := inspect(t, srv.URL())
			for _, topic := range roundTripTopics {
				eventually(t, func() bool { return in.unsettled(n.tr, topic) == 0 }, "the ack of "+topic)
				require.Zero(t, in.stored(n.tr, topic))
			}
			require.Zero(t, in.stored(n.tr, "reply.solo"))
			require.Zero(t, in.delivered(n.tr, "reply.solo"))
		})
	}
}

// Node A sends, node B handles, A gets the reply on its own subject.
func TestDispatchAcrossTwoNodes(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	b := newNode(t, srv.URL(), "node-b", natstransport.Config{}, bus.Config{Middleware: []middleware.Middleware{takenMiddleware}}, registerRoundTrip(t))
	a := newNode(t, srv.URL(), "node-a", natstransport.Config{}, bus.Config{}, nil)
	checkRoundTrip(t, a.bus)
	require.Zero(t, b.bus.Pending())
	in := inspect(t, srv.URL())
	eventually(t, func() bool { return in.unsettled(a.tr, "reply.node-a") == 0 }, "the replies to be acked")
	require.Zero(t, in.stored(a.tr, "reply.node-a"))
	// The four replies went to A's own consumer; B's got none.
	require.Equal(t, 4, in.delivered(a.tr, "reply.node-a"))
	require.Zero(t, in.delivered(b.tr, "reply.node-b"))
}

func TestEachCommandHandledOnceAcrossNodes(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
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
	var nodes []*node
	for _, id := range []string{"node-a", "node-b", "node-c"} {
		nodes = append(nodes, newNode(t, srv.URL(), id, natstransport.Config{}, bus.Config{}, reg(id)))
	}

	const perNode = 40
	var wg sync.WaitGroup
	for i, n := range nodes {
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
	sent := len(nodes) * perNode
	for j := range perNode {
		require.NoError(t, nodes[0].bus.Send(context.Background(), &Count{N: sent + j}))
	}
	wg.Wait()
	total := sent + perNode
	eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(handled) == total
	}, "every sent command to be handled")
	in := inspect(t, srv.URL())
	eventually(t, func() bool { return in.unsettled(nodes[0].tr, "command.natstransport_test.Count") == 0 }, "every command to be acked")
	for _, n := range nodes {
		require.NoError(t, n.bus.Close())
	}
	mu.Lock()
	defer mu.Unlock()
	by := map[string]int{}
	for n, ids := range handled {
		require.Len(t, ids, 1, "command %d handled by %v", n, ids)
		by[ids[0]]++
	}
	require.Len(t, handled, total)
	require.Len(t, by, len(nodes), "every node handled some: %v", by)
}

func TestHandlerErrorAnsweredOnceNotRedelivered(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	var calls atomic.Int32
	b := newNode(t, srv.URL(), "node-b", natstransport.Config{AckWait: 200 * time.Millisecond}, bus.Config{}, func(b *bus.Bus) {
		require.NoError(t, bus.Handle(b, func(_ context.Context, c *Fail) (string, error) {
			calls.Add(1)
			return "", errors.New("no")
		}))
	})
	a := newNode(t, srv.URL(), "node-a", natstransport.Config{AckWait: 200 * time.Millisecond}, bus.Config{}, nil)
	_, err := bus.Dispatch[string](context.Background(), a.bus, &Fail{})
	require.ErrorContains(t, err, "no")
	// Acked, so deleted: never delivered again, even after AckWait.
	in := inspect(t, srv.URL())
	topic := "command.natstransport_test.Fail"
	eventually(t, func() bool { return in.unsettled(b.tr, topic) == 0 && in.stored(b.tr, topic) == 0 }, "the ack")
	require.NoError(t, b.bus.Close())
	require.EqualValues(t, 1, calls.Load())
}

// A handler that dispatches another command and waits for it: the child
// is delivered while the parent is being handled, and the ids propagate.
func TestNestedDispatchAcrossNodes(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
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
	newNode(t, srv.URL(), "node-b", natstransport.Config{}, bus.Config{Middleware: []middleware.Middleware{record}}, reg)
	a := newNode(t, srv.URL(), "node-a", natstransport.Config{}, bus.Config{}, nil)

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	got, err := bus.Dispatch[string](middleware.WithIDs(ctx, middleware.IDs{CorrelationID: "flow-1"}), a.bus, &Parent{})
	require.NoError(t, err)
	require.Equal(t, "child done", got)
	mu.Lock()
	defer mu.Unlock()
	parent, child := seen["natstransport_test.Parent"], seen["natstransport_test.Child"]
	require.Equal(t, "flow-1", parent.correlation)
	require.Equal(t, "flow-1", child.correlation)
	require.Equal(t, parent.id, child.causation)
	_, err = uuid.Parse(child.id)
	require.NoError(t, err)
}

func TestTimeoutLeavesNothingPending(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	release := make(chan struct{})
	var handled atomic.Int32
	newNode(t, srv.URL(), "node-b", natstransport.Config{}, bus.Config{}, func(b *bus.Bus) {
		require.NoError(t, bus.Handle(b, func(_ context.Context, c *Block) (int, error) {
			if c.ID == 1 {
				<-release
			}
			handled.Add(1)
			return c.ID, nil
		}))
	})
	a := newNode(t, srv.URL(), "node-a", natstransport.Config{}, bus.Config{}, nil)

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
	in := inspect(t, srv.URL())
	eventually(t, func() bool {
		return in.unsettled(a.tr, "reply.node-a") == 0 && in.stored(a.tr, "reply.node-a") == 0
	}, "the late reply to be dropped")
	got, err := bus.Dispatch[int](context.Background(), a.bus, &Block{ID: 2})
	require.NoError(t, err)
	require.Equal(t, 2, got)
	require.Zero(t, a.bus.Pending())
}

// A message that is no command: acked, sent to the poison topic, never
// delivered again.
func TestUndecodableMessageIsPoisoned(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	var calls atomic.Int32
	n := newNode(t, srv.URL(), "node-a", natstransport.Config{}, bus.Config{PoisonTopic: "poison"}, func(b *bus.Bus) {
		require.NoError(t, bus.Handle(b, func(_ context.Context, c *Echo) (string, error) {
			calls.Add(1)
			return c.Text, nil
		}))
	})
	topic := "command.natstransport_test.Echo"
	garbage := message.NewMessage(uuid.NewString(), []byte("not json"))
	garbage.Metadata.Set(middleware.MetadataCommandName, "natstransport_test.Echo")
	require.NoError(t, n.tr.Publisher().Publish(topic, garbage))
	unknown := message.NewMessage(uuid.NewString(), []byte("{}"))
	require.NoError(t, n.tr.Publisher().Publish(topic, unknown))

	in := inspect(t, srv.URL())
	eventually(t, func() bool { return in.unsettled(n.tr, topic) == 0 }, "both to be acked")
	eventually(t, func() bool { return in.stored(n.tr, "poison") == 2 }, "both to be poisoned")
	require.Zero(t, calls.Load())

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	poison, err := n.tr.Subscriber().Subscribe(ctx, "poison")
	require.NoError(t, err)
	reasons := map[string]string{}
	for range 2 {
		select {
		case msg := <-poison:
			reasons[msg.UUID] = msg.Metadata.Get(bus.MetadataPoisonReason)
			msg.Ack()
		case <-time.After(20 * time.Second):
			t.Fatal("no poison message")
		}
	}
	require.Contains(t, reasons[garbage.UUID], "undecodable command natstransport_test.Echo")
	require.Contains(t, reasons[unknown.UUID], `unknown command ""`)

	got, err := bus.Dispatch[string](context.Background(), n.bus, &Echo{Text: "still fine"})
	require.NoError(t, err)
	require.Equal(t, "still fine", got)
}

// Several nodes creating the stream and the same consumers at once.
func TestStreamAndConsumersCreatedConcurrently(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	const n = 8
	trs := make([]*natstransport.Transport, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			tr, err := natstransport.New(context.Background(), srv.URL(), natstransport.Config{NodeID: fmt.Sprintf("n%d", i)})
			if err != nil {
				t.Errorf("New: %v", err)
				return
			}
			trs[i] = tr
		})
	}
	wg.Wait()
	for _, tr := range trs {
		if tr != nil {
			t.Cleanup(func() { require.NoError(t, tr.Close()) })
		}
	}
	require.False(t, t.Failed())

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	chans := make([]<-chan *message.Message, n)
	for i, tr := range trs {
		wg.Go(func() {
			for _, topic := range []string{"t1", "t2", "t3"} {
				ch, err := tr.Subscriber().Subscribe(ctx, topic)
				if err != nil {
					t.Errorf("Subscribe %s: %v", topic, err)
					return
				}
				if topic == "t1" {
					chans[i] = ch
				}
			}
		})
	}
	wg.Wait()
	require.False(t, t.Failed())
	// One consumer for t1 that the eight subscriptions share.
	for range 3 * n {
		require.NoError(t, trs[0].Publisher().Publish("t1", message.NewMessage(uuid.NewString(), []byte("{}"))))
	}
	got := make(chan struct{}, 3*n)
	for _, ch := range chans {
		wg.Go(func() {
			for msg := range ch {
				msg.Ack()
				got <- struct{}{}
			}
		})
	}
	for range 3 * n {
		select {
		case <-got:
		case <-time.After(20 * time.Second):
			t.Fatal("a message of t1 was not delivered")
		}
	}
	cancel()
	wg.Wait()
	require.Empty(t, got, "a message delivered twice")
}

func TestSendAcrossNodes(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	got := make(chan string, 1)
	newNode(t, srv.URL(), "node-b", natstransport.Config{}, bus.Config{}, func(b *bus.Bus) {
		require.NoError(t, bus.Handle(b, func(_ context.Context, c *Echo) (struct{}, error) {
			got <- c.Text
			return struct{}{}, nil
		}))
	})
	a := newNode(t, srv.URL(), "node-a", natstransport.Config{}, bus.Config{}, nil)
	require.NoError(t, a.bus.Send(context.Background(), &Echo{Text: "fire"}))
	select {
	case s := <-got:
		require.Equal(t, "fire", s)
	case <-time.After(20 * time.Second):
		t.Fatal("the sent command was not handled")
	}
}

// A command sent before any node handles it waits in the stream for the
// first one.
func TestCommandWaitsForAHandler(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	a := newNode(t, srv.URL(), "node-a", natstransport.Config{}, bus.Config{}, nil)
	require.NoError(t, a.bus.Send(context.Background(), &Echo{Text: "early"}))
	got := make(chan string, 1)
	newNode(t, srv.URL(), "node-b", natstransport.Config{}, bus.Config{}, func(b *bus.Bus) {
		require.NoError(t, bus.Handle(b, func(_ context.Context, c *Echo) (struct{}, error) {
			got <- c.Text
			return struct{}{}, nil
		}))
	})
	select {
	case s := <-got:
		require.Equal(t, "early", s)
	case <-time.After(20 * time.Second):
		t.Fatal("the early command was not handled")
	}
}

func TestClosedTransport(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	tr, err := natstransport.New(context.Background(), srv.URL(), natstransport.Config{NodeID: "n"})
	require.NoError(t, err)
	require.NoError(t, tr.Close())
	require.NoError(t, tr.Close(), "Close is idempotent")
	require.ErrorIs(t, tr.Publisher().Publish("t", message.NewMessage(uuid.NewString(), nil)), natstransport.ErrClosed)
	_, err = tr.Subscriber().Subscribe(context.Background(), "t")
	require.ErrorIs(t, err, natstransport.ErrClosed)
	_, err = tr.ReplySubscriber().Subscribe(context.Background(), "t")
	require.ErrorIs(t, err, natstransport.ErrClosed)
	require.ErrorIs(t, err, bus.ErrClosed, "one meaning, one sentinel")

	tr2, err := natstransport.New(context.Background(), srv.URL(), natstransport.Config{NodeID: "m"})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, tr2.Close()) })
	require.ErrorIs(t, tr2.Publisher().Publish("", message.NewMessage(uuid.NewString(), nil)), natstransport.ErrInvalidTopic)
	_, err = tr2.Subscriber().Subscribe(context.Background(), "")
	require.ErrorIs(t, err, natstransport.ErrInvalidTopic)
	require.ErrorIs(t, err, bus.ErrInvalidTopic)
	// Metadata a NATS header would not carry unchanged is refused.
	for k, v := range map[string]string{"a b": "x", "k": "line\nbreak", "Nats-Msg-Id": "x", "j": " leading"} {
		msg := message.NewMessage(uuid.NewString(), nil)
		msg.Metadata.Set(k, v)
		require.ErrorIs(t, tr2.Publisher().Publish("t", msg), natstransport.ErrInvalidMetadata, "%q: %q", k, v)
	}
}

// Topics NATS would refuse as subjects, long ones and ones that read alike
// each get a subject and a consumer of their own.
func TestTopicsNATSDisallows(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	tr, err := natstransport.New(context.Background(), srv.URL(), natstransport.Config{NodeID: "n"})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, tr.Close()) })
	long := "command." + strings.Repeat("x", 300)
	topics := []string{
		long + ".One", long + ".Two", "a b", "a*b", "a.>", "a..b", ".a", "a.", "a_b", "a.b", "é.ü", "$SYS.x", "a%2Eb",
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for _, topic := range topics {
		require.NoError(t, tr.Publisher().Publish(topic, message.NewMessage(uuid.NewString(), []byte(topic))), topic)
	}
	for _, topic := range topics {
		ch, err := tr.Subscriber().Subscribe(ctx, topic)
		require.NoError(t, err, topic)
		select {
		case msg := <-ch:
			require.Equal(t, topic, string(msg.Payload))
			msg.Ack()
		case <-time.After(20 * time.Second):
			t.Fatal("no message on", topic)
		}
	}
}

// A message from another client whose headers watermill-nats cannot
// decode (a header with two values) is terminated: never handed over,
// never delivered again, gone from the work queue.
func TestUndecodableHeadersTerminated(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	var calls atomic.Int32
	n := newNode(t, srv.URL(), "node-a", natstransport.Config{AckWait: 200 * time.Millisecond}, bus.Config{}, func(b *bus.Bus) {
		require.NoError(t, bus.Handle(b, func(_ context.Context, c *Echo) (string, error) {
			calls.Add(1)
			return c.Text, nil
		}))
	})
	topic := "command.natstransport_test.Echo"
	nc, err := nats.Connect(srv.URL())
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	js, err := nc.JetStream()
	require.NoError(t, err)
	raw := nats.NewMsg(n.tr.Subject(topic))
	raw.Header.Add("name", "natstransport_test.Echo")
	raw.Header.Add("name", "twice")
	raw.Data = []byte(`{"Text":"x"}`)
	_, err = js.PublishMsg(raw)
	require.NoError(t, err)

	in := inspect(t, srv.URL())
	eventually(t, func() bool { return in.delivered(n.tr, topic) == 1 && in.unsettled(n.tr, topic) == 0 }, "the termination")
	require.Zero(t, in.stored(n.tr, topic))
	got, err := bus.Dispatch[string](context.Background(), n.bus, &Echo{Text: "fine"})
	require.NoError(t, err)
	require.Equal(t, "fine", got)
	require.EqualValues(t, 1, calls.Load(), "only the good command ran")
}
