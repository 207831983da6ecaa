package natstransport_test

import (
	"context"
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
)

type (
	Echo  struct{ Text string }
	Block struct{ ID int }
)

// Replies travel to the consumer of the sender's reply topic, which only
// it uses; a node's replies to itself never travel.
func TestRepliesGoToTheSendersConsumer(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	reg := func(b *bus.Bus) {
		require.NoError(t, bus.Handle(b, func(_ context.Context, c *Echo) (string, error) { return c.Text, nil }))
	}
	b := newNode(t, srv.URL(), "node-b", natstransport.Config{}, bus.Config{}, reg)
	a := newNode(t, srv.URL(), "node-a", natstransport.Config{}, bus.Config{}, nil)
	for i := range 4 {
		got, err := bus.Dispatch[string](context.Background(), a.bus, &Echo{Text: fmt.Sprint(i)})
		require.NoError(t, err)
		require.Equal(t, fmt.Sprint(i), got)
	}
	for i := range 2 {
		_, err := bus.Dispatch[string](context.Background(), b.bus, &Echo{Text: fmt.Sprint(i)})
		require.NoError(t, err)
	}
	in := inspect(t, srv.URL())
	eventually(t, func() bool { return in.unsettled(a.tr, "reply.node-a") == 0 }, "the replies to be acked")
	require.Zero(t, in.stored(a.tr, "reply.node-a"))
	require.Equal(t, 4, in.delivered(a.tr, "reply.node-a"))
	require.Zero(t, in.delivered(b.tr, "reply.node-b"))
	require.Zero(t, in.stored(b.tr, "reply.node-b"))
}

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
				ch, err := tr.BusConfig(bus.Config{}).Subscriber.Subscribe(ctx, topic)
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
		require.NoError(t, trs[0].BusConfig(bus.Config{}).Publisher.Publish("t1", message.NewMessage(uuid.NewString(), []byte("{}"))))
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

func TestClosedTransport(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	tr, err := natstransport.New(context.Background(), srv.URL(), natstransport.Config{NodeID: "n"})
	require.NoError(t, err)
	require.NoError(t, tr.Close())
	require.NoError(t, tr.Close(), "Close is idempotent")
	subscribe := func(s message.Subscriber) error {
		_, err := s.Subscribe(context.Background(), "t")
		return err
	}
	for what, err := range map[string]error{
		"Publish":                   tr.BusConfig(bus.Config{}).Publisher.Publish("t", message.NewMessage(uuid.NewString(), nil)),
		"Subscribe":                 subscribe(tr.BusConfig(bus.Config{}).Subscriber),
		"ReplySubscriber.Subscribe": subscribe(tr.BusConfig(bus.Config{}).ReplySubscriber),
	} {
		require.ErrorIs(t, err, bus.ErrClosed, what)
	}

	tr2, err := natstransport.New(context.Background(), srv.URL(), natstransport.Config{NodeID: "m"})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, tr2.Close()) })
	require.ErrorIs(t, tr2.BusConfig(bus.Config{}).Publisher.Publish("", message.NewMessage(uuid.NewString(), nil)), bus.ErrInvalidTopic)
	_, err = tr2.BusConfig(bus.Config{}).Subscriber.Subscribe(context.Background(), "")
	require.ErrorIs(t, err, bus.ErrInvalidTopic)
	// Metadata a NATS header would not carry unchanged is refused.
	for k, v := range map[string]string{"a b": "x", "k": "line\nbreak", "Nats-Msg-Id": "x", "j": " leading"} {
		msg := message.NewMessage(uuid.NewString(), nil)
		msg.Metadata.Set(k, v)
		require.ErrorIs(t, tr2.BusConfig(bus.Config{}).Publisher.Publish("t", msg), natstransport.ErrInvalidMetadata, "%q: %q", k, v)
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
		require.NoError(t, tr.BusConfig(bus.Config{}).Publisher.Publish(topic, message.NewMessage(uuid.NewString(), []byte(topic))), topic)
	}
	// Each topic's subscription gets the message published to it, and
	// only that one.
	for _, topic := range topics {
		ch, err := tr.BusConfig(bus.Config{}).Subscriber.Subscribe(ctx, topic)
		require.NoError(t, err, topic)
		timeout := time.NewTimer(20 * time.Second)
		select {
		case <-timeout.C:
			t.Fatal("no message on", topic)
		case msg := <-ch:
			timeout.Stop()
			require.Equal(t, topic, string(msg.Payload))
			msg.Ack()
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
	raw := nats.NewMsg(natstransport.Subject(n.tr, topic))
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
