package natstransport

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	wmnats "github.com/ThreeDotsLabs/watermill-nats/v2/pkg/nats"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/nats-io/nats.go"

	"github.com/claimbus/claimbus/bus"
	"github.com/claimbus/claimbus/internal/wire"
)

// handOver is the AckWaitTimeout given to watermill-nats. Its subscriber
// waits that long for a message's ack after handing it over, then returns
// to take the next one; when its subscription ends while it waits, it
// drops the ack, so a message acked just before a bus closed would be
// delivered again. The transport therefore acks and naks on the NATS
// message itself (see settle), where Close can wait for it, and lets
// watermill-nats return at once: its subscription only hands messages
// over, and how many run at once is the bus's HandlerConcurrency.
const handOver = time.Nanosecond

// subscriber starts one watermill-nats subscriber per subscription, bound
// to the topic's durable consumer.
type subscriber struct {
	t *Transport
	// ackSync makes an ack wait for the server's confirmation (commands:
	// an ack lost on the way is a command handled twice); replies are
	// acked without waiting (a reply delivered twice is dropped).
	ackSync bool
	// dropExpired terminates a command whose sender's deadline
	// (metadata claimbus_deadline) has passed instead of handing it over.
	dropExpired bool
}

// Subscribe creates topic's consumer unless it exists (ctx bounds that,
// and RequestTimeout), joins its queue group, and returns its messages
// until ctx ends or the transport closes. When the subscription ends, a
// message it handed over and that was not acked or nacked is handed back:
// delivered again after handBackDelay, to another node.
func (s *subscriber) Subscribe(ctx context.Context, topic string) (<-chan *message.Message, error) {
	if topic == "" {
		return nil, fmt.Errorf("natstransport: subscribe: %w", bus.ErrInvalidTopic)
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("natstransport: subscribe to %q: %w", topic, err)
	}
	if err := s.t.enter(); err != nil {
		return nil, err
	}
	sub, err := s.start(ctx, topic)
	if err != nil {
		s.t.wg.Done()
		return nil, err
	}
	go sub.run()
	return sub.out, nil
}

// Close does nothing: the transport's Close ends every subscription.
func (s *subscriber) Close() error { return nil }

func (s *subscriber) start(ctx context.Context, topic string) (*subscription, error) {
	t := s.t
	ccfg, err := t.ensureConsumer(ctx, topic)
	if err != nil {
		return nil, err
	}
	sub := &subscription{
		s:       s,
		ctx:     ctx,
		out:     make(chan *message.Message),
		stopped: make(chan struct{}),
		held:    &held{m: make(map[*message.Message]*nats.Msg)},
		logger:  t.logger.With(watermill.LogFields{"topic": topic}),
	}
	sub.held.sub = sub
	inner, err := wmnats.NewSubscriberWithNatsConn(t.nc, wmnats.SubscriberSubscriptionConfig{
		Unmarshaler:      sub.held,
		SubscribersCount: 1,
		AckWaitTimeout:   handOver,
		SubjectCalculator: func(_, subject string) *wmnats.SubjectDetail {
			return &wmnats.SubjectDetail{Primary: subject, QueueGroup: ccfg.DeliverGroup}
		},
		JetStream: wmnats.JetStreamConfig{
			ConnectOptions: []nats.JSOpt{nats.MaxWait(t.cfg.RequestTimeout)},
			// Bind: never create the consumer (New did) and so never delete
			// it when this subscription ends; the other nodes share it.
			SubscribeOptions: []nats.SubOpt{nats.Bind(t.cfg.Stream, ccfg.Durable), nats.ManualAck()},
			DurablePrefix:    ccfg.Durable,
		},
	}, quietStopping{sub.logger})
	if err != nil {
		return nil, wrap(ctx, fmt.Sprintf("subscribe to %q", topic), err)
	}
	// Never inner.Close: it would drain the transport's connection. The
	// subscription ends with innerCtx.
	innerCtx, cancel := context.WithCancel(context.Background())
	in, err := inner.Subscribe(innerCtx, ccfg.FilterSubject)
	if err != nil {
		cancel()
		return nil, wrap(ctx, fmt.Sprintf("subscribe to %q", topic), err)
	}
	sub.in, sub.cancelInner = in, cancel
	return sub, nil
}

// subscription is one Subscribe: it forwards the messages of its
// watermill-nats subscription and settles each with the server once its
// consumer acks or nacks it.
type subscription struct {
	s      *subscriber
	ctx    context.Context // the caller's: the subscription ends with it
	logger watermill.LoggerAdapter

	in          <-chan *message.Message // from watermill-nats
	cancelInner context.CancelFunc
	held        *held
	out         chan *message.Message

	stopped  chan struct{}  // closed when forwarding stops
	settling sync.WaitGroup // settle goroutines
}

// run forwards messages until ctx ends or the transport closes, then ends
// the subscription in order:
//   - what was handed over and not settled is handed back (see settle);
//   - watermill-nats stops handing over: from now on its callbacks end in
//     Unmarshal, which hands their message back, and the messages of the
//     callbacks already past Unmarshal are received and handed back. Only
//     then does its subscription end: watermill-nats closes its output
//     channel when it has unsubscribed, without waiting for a callback that
//     is still running, and a callback that then sends on it panics;
//   - the watermill-nats subscription ends (it unsubscribes) and out
//     closes.
func (sub *subscription) run() {
	defer sub.s.t.wg.Done()
	sub.forward()
	close(sub.stopped)
	for n := sub.held.close(); n > 0; n-- {
		sub.handBack(sub.held.take(<-sub.in))
	}
	sub.settling.Wait()
	sub.cancelInner()
	for msg := range sub.in {
		// Nothing comes: every callback now ends in Unmarshal.
		sub.handBack(sub.held.take(msg))
	}
	close(sub.out)
}

func (sub *subscription) forward() {
	renew := time.NewTicker(sub.s.t.renewEvery())
	defer renew.Stop()
	for {
		select {
		case <-sub.ctx.Done():
			return
		case <-sub.s.t.stop:
			return
		case msg, ok := <-sub.in:
			if !ok {
				sub.logger.Error("The NATS subscription ended on its own", nil, nil)
				return
			}
			nm := sub.held.take(msg)
			if sub.s.dropExpired && sub.expired(msg, nm) {
				continue
			}
			// A message of our own: watermill-nats never sees its ack.
			fwd := msg.Copy()
			fwd.SetContext(sub.ctx)
			renew.Reset(sub.s.t.renewEvery())
		handOver:
			for {
				select {
				case sub.out <- fwd:
					sub.settling.Add(1)
					go sub.settle(fwd, nm)
					break handOver
				case <-renew.C:
					sub.renew(nm)
				case <-sub.ctx.Done():
					sub.handBack(nm)
					return
				case <-sub.s.t.stop:
					sub.handBack(nm)
					return
				}
			}
		}
	}
}

// expired terminates nm and reports true when msg carries a sender's
// deadline (its claimbus_deadline metadata) that has passed: nobody waits for its
// outcome, and the bus would not start its handler.
func (sub *subscription) expired(msg *message.Message, nm *nats.Msg) bool {
	d, err := time.Parse(time.RFC3339Nano, msg.Metadata.Get(wire.MetadataDeadline))
	if err != nil || time.Now().Before(d) {
		return false
	}
	fields := msgFields(nm)
	fields["deadline"] = d
	if err := nm.Term(); err != nil {
		sub.logger.Error("Cannot terminate a command past its deadline; the server delivers it again after AckWait", err, fields)
	} else {
		sub.logger.Info("Dropped a command past its sender's deadline", fields)
	}
	return true
}

// settle acks nm when msg is acked and naks it when msg is nacked,
// renewing it until then (see renew); when the subscription stops first,
// it acks nm if msg was acked by then and hands it back otherwise. A bus
// acks every message it handled before it ends its subscriptions, so
// those acks are never lost.
func (sub *subscription) settle(msg *message.Message, nm *nats.Msg) {
	defer sub.settling.Done()
	renew := time.NewTicker(sub.s.t.renewEvery())
	defer renew.Stop()
wait:
	for {
		select {
		case <-msg.Acked():
			sub.ack(nm)
			return
		case <-msg.Nacked():
			sub.nak(nm)
			return
		case <-renew.C:
			sub.renew(nm)
		case <-sub.stopped:
			break wait
		}
	}
	select {
	case <-msg.Acked():
		sub.ack(nm)
	default:
		sub.handBack(nm)
	}
}

func (sub *subscription) ack(nm *nats.Msg) {
	var err error
	if sub.s.ackSync {
		err = nm.AckSync()
	} else {
		err = nm.Ack()
	}
	if err != nil {
		sub.logger.Error("Cannot ack a message; the server delivers it again after AckWait", err, msgFields(nm))
	}
}

// renew tells the server that this node still holds nm (an in-progress
// ack), which restarts its AckWait. A node that dies stops renewing, and
// the server delivers its messages again within AckWait. A renewal that
// cannot be sent (the connection is down) is not logged: the connection's
// loss is.
func (sub *subscription) renew(nm *nats.Msg) {
	if err := nm.InProgress(); err != nil {
		sub.logger.Debug("Cannot renew a message", msgFields(nm).Add(watermill.LogFields{"error": err}))
	}
}

// nak naks nm, a message its consumer nacked, so that the server delivers
// it again at once (to this subscription or another).
func (sub *subscription) nak(nm *nats.Msg) {
	if err := nm.Nak(); err != nil {
		sub.logger.Error("Cannot nak a message; the server delivers it again after AckWait", err, msgFields(nm))
	}
}

// handBackDelay is how long after a subscription that is ending hands a
// message back the server delivers it again. A message handed back at once
// could be delivered again to this very subscription, which is still a
// member of the consumer's delivery group until its unsubscribe reaches the
// server; a delivery that arrives after the unsubscribe is dropped by the
// client unanswered, and the message then waits the whole AckWait. The
// delay lets the unsubscribe land first, so that another node gets it.
const handBackDelay = 250 * time.Millisecond

// handBack hands nm, if any, back to the server as the subscription ends:
// a nak that has the message delivered again after handBackDelay, to
// another subscription.
func (sub *subscription) handBack(nm *nats.Msg) {
	if nm == nil {
		return
	}
	if err := nm.NakWithDelay(handBackDelay); err != nil {
		sub.logger.Error("Cannot hand a message back; the server delivers it again after AckWait", err, msgFields(nm))
	}
}

func msgFields(nm *nats.Msg) watermill.LogFields {
	return watermill.LogFields{"subject": nm.Subject, "message_uuid": nm.Header.Get(wmnats.WatermillUUIDHdr)}
}

// errStopping is what Unmarshal returns once its subscription is ending,
// so that watermill-nats drops the message before it would hand it over.
var errStopping = errors.New("natstransport: the subscription is ending")

// quietStopping is the logger of watermill-nats: it leaves out the error
// watermill-nats logs for errStopping, which is no fault.
type quietStopping struct{ watermill.LoggerAdapter }

func (l quietStopping) Error(msg string, err error, fields watermill.LogFields) {
	if !errors.Is(err, errStopping) {
		l.LoggerAdapter.Error(msg, err, fields)
	}
}

func (l quietStopping) With(fields watermill.LogFields) watermill.LoggerAdapter {
	return quietStopping{l.LoggerAdapter.With(fields)}
}

// held is the Unmarshaler of one subscription's watermill-nats
// subscriber: it decodes with NATSMarshaler and keeps each NATS message
// until the subscription takes it, to settle it.
type held struct {
	sub    *subscription
	mu     sync.Mutex
	m      map[*message.Message]*nats.Msg
	closed bool
}

// Unmarshal decodes nm. A message that cannot be decoded never will be:
// it is terminated (never delivered again) and logged.
func (h *held) Unmarshal(nm *nats.Msg) (*message.Message, error) {
	msg, err := (&wmnats.NATSMarshaler{}).Unmarshal(nm)
	if err != nil {
		if terr := nm.Term(); terr != nil {
			h.sub.logger.Error("Cannot terminate an undecodable message", terr, msgFields(nm))
		}
		return nil, err
	}
	h.mu.Lock()
	if h.closed {
		// The subscription is ending: watermill-nats must not hand it over.
		h.mu.Unlock()
		h.sub.handBack(nm)
		return nil, errStopping
	}
	h.m[msg] = nm
	h.mu.Unlock()
	return msg, nil
}

// take returns msg's NATS message and forgets it.
func (h *held) take(msg *message.Message) *nats.Msg {
	h.mu.Lock()
	defer h.mu.Unlock()
	nm := h.m[msg]
	delete(h.m, msg)
	return nm
}

// close makes Unmarshal refuse (and hand back) the messages it decodes
// from now on, and returns how many it decoded that were not taken yet:
// each is in a watermill-nats callback that will hand it over.
func (h *held) close() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.closed = true
	return len(h.m)
}
