package natstransport

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	wmnats "github.com/ThreeDotsLabs/watermill-nats/v2/pkg/nats"
	"github.com/nats-io/nats.go"

	"github.com/claimbus/claimbus/bus"
	"github.com/claimbus/claimbus/bus/internal/transport"
)

// Transport carries the commands and replies of a bus through one NATS
// JetStream stream with watermill-nats: a subject per topic, a durable
// consumer per topic that every node's subscription shares, a message
// deleted from the stream when it is acked.
type Transport struct {
	cfg    Config
	nc     *nats.Conn
	js     nats.JetStreamContext // for the stream and the consumers
	logger watermill.LoggerAdapter

	publisher *publisher
	commands  *subscriber
	replies   *subscriber

	// mu guards closed and the adding to wg, so that Close never waits
	// while a subscription is being added.
	mu     sync.Mutex
	closed bool
	stop   chan struct{} // closed by Close
	wg     sync.WaitGroup
	once   sync.Once
}

// New connects to the NATS server(s) at url (a nats:// URL, or several
// separated by commas) for the node cfg names, and creates the stream
// unless it exists with the same configuration; ctx bounds the stream's
// creation. The transport owns its connection and closes it in Close:
// watermill-nats's publisher and subscribers close the connection they
// are given, so a connection of the caller's could not be shared. Give
// credentials and TLS through Config.NatsOptions.
//
// New fails with an error matching middleware.ErrUnavailable when no
// server can be reached, and with ErrConfigMismatch when the stream exists
// with other settings.
func New(ctx context.Context, url string, cfg Config) (*Transport, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if url == "" {
		return nil, errors.New("natstransport: no NATS URL")
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("natstransport: %w", err)
	}
	cfg = cfg.withDefaults()
	t := &Transport{
		cfg:    cfg,
		logger: cfg.Logger.With(watermill.LogFields{"node": cfg.NodeID}),
		stop:   make(chan struct{}),
	}
	opts := append([]nats.Option{
		nats.Name("claimbus " + cfg.NodeID),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(cfg.ReconnectWait),
		// A publish while the connection is down fails at once instead of
		// waiting in a buffer and reaching the stream after its caller has
		// been told it failed.
		nats.ReconnectBufSize(-1),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			if !t.isClosed() {
				t.logger.Error("NATS connection lost; reconnecting", err, nil)
			}
		}),
		nats.ReconnectHandler(func(nc *nats.Conn) {
			t.logger.Info("NATS connection back", watermill.LogFields{"server": nc.ConnectedUrlRedacted()})
		}),
		nats.ErrorHandler(func(_ *nats.Conn, sub *nats.Subscription, err error) {
			fields := watermill.LogFields{}
			if sub != nil {
				fields["subject"] = sub.Subject
			}
			t.logger.Error("NATS error", err, fields)
		}),
	}, cfg.NatsOptions...)
	nc, err := nats.Connect(url, opts...)
	if err != nil {
		return nil, wrap(ctx, "connect", err)
	}
	t.nc = nc
	fail := func(err error) (*Transport, error) {
		nc.Close()
		return nil, err
	}
	if t.js, err = nc.JetStream(nats.MaxWait(cfg.RequestTimeout)); err != nil {
		return fail(wrap(ctx, "JetStream", err))
	}
	if err := t.ensureStream(ctx); err != nil {
		return fail(err)
	}
	inner, err := wmnats.NewPublisherWithNatsConn(nc, wmnats.PublisherPublishConfig{
		Marshaler:         marshaler{},
		SubjectCalculator: wmnats.DefaultSubjectCalculator,
		JetStream: wmnats.JetStreamConfig{
			ConnectOptions: []nats.JSOpt{nats.MaxWait(cfg.RequestTimeout)},
			// The server refuses a message that another stream would
			// capture: it would never reach a consumer of ours.
			PublishOptions: []nats.PubOpt{nats.ExpectStream(cfg.Stream)},
		},
	}, t.logger)
	if err != nil {
		return fail(wrap(ctx, "publisher", err))
	}
	t.publisher = &publisher{t: t, inner: inner}
	t.commands = &subscriber{t: t, ackSync: true, dropExpired: true}
	t.replies = &subscriber{t: t}
	return t, nil
}

// BusConfig returns cfg with the transport's publishers and subscribers
// and its node id set, ready for bus.New. The publisher stores each
// message in the stream before Publish returns, or fails within
// RequestTimeout; it does not consult the message's context. The command
// subscriber acks a command once the bus acks it, and the ack waits for
// the server's confirmation. The reply subscriber reads from a consumer
// that only this node uses.
func (t *Transport) BusConfig(cfg bus.Config) bus.Config {
	return transport.BusConfig(cfg, t.publisher, t.commands, t.replies, t.cfg.NodeID)
}

// Close ends every subscription, waits for their goroutines, and closes
// the connection. Close the buses that use the transport first: their
// handlers then finish and their messages are acked, where Close hands a
// message still unacked back to the server (a nak), which delivers it
// again after handBackDelay, to another node. Close is idempotent.
func (t *Transport) Close() error {
	t.once.Do(func() {
		t.mu.Lock()
		t.closed = true
		close(t.stop)
		t.mu.Unlock()
		t.wg.Wait()
		// The acks and naks of the subscriptions are written; send them
		// before the connection goes.
		if t.nc.IsConnected() {
			if err := t.nc.FlushTimeout(t.cfg.RequestTimeout); err != nil {
				t.logger.Error("Cannot flush the NATS connection before closing it", err, nil)
			}
		}
		t.nc.Close()
	})
	return nil
}

// renewEvery is how often a subscription renews each message it holds: a
// third of AckWait, so that a renewal delayed by a busy node or a slow
// network still lands in time.
func (t *Transport) renewEvery() time.Duration { return t.cfg.AckWait / 3 }

func (t *Transport) isClosed() bool {
	select {
	case <-t.stop:
		return true
	default:
		return false
	}
}

// enter counts a subscription about to start, unless the transport is
// closed.
func (t *Transport) enter() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return fmt.Errorf("natstransport: subscribe: %w", bus.ErrClosed)
	}
	t.wg.Add(1)
	return nil
}
