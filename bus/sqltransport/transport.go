package sqltransport

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	wsql "github.com/ThreeDotsLabs/watermill-sql/v4/pkg/sql"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/claimbus/claimbus/bus"
	"github.com/claimbus/claimbus/bus/internal/transport"
)

// Transport carries the commands and replies of a bus through PostgreSQL
// tables, published to with watermill-sql: one table per topic, a row per
// message, deleted when the message is acked.
type Transport struct {
	cfg    Config
	pool   *pgxpool.Pool
	schema queueSchema
	logger watermill.LoggerAdapter

	publisher *publisher
	commands  *subscriber
	replies   *subscriber

	initialized sync.Map // topic → struct{}: its table exists

	wakesMu sync.Mutex
	wakes   map[string]*wake // by unquoted table name

	lossMu   sync.Mutex
	lossNext int
	loss     map[int]func(error) // the buses told of a lost connection

	stop      chan struct{}
	closeOnce sync.Once
	cancel    context.CancelFunc
	wg        sync.WaitGroup
}

// New returns a transport on pool for the node cfg names. Unless
// notifications are disabled, it opens one connection of its own (outside
// the pool, with the pool's settings) that LISTENs for new messages; ctx
// bounds that connection's opening.
//
// A subscription holds a pool connection only for its queries: one to
// take up to 64 messages, one to settle every ack, hand-back and lease
// renewal waiting, so a small pool serves many topics and handlers.
func New(ctx context.Context, pool *pgxpool.Pool, cfg Config) (*Transport, error) {
	if pool == nil {
		return nil, fmt.Errorf("sqltransport: nil pool")
	}
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	t := &Transport{
		cfg:    cfg,
		pool:   pool,
		schema: newQueueSchema(cfg.TablePrefix),
		logger: cfg.Logger.With(watermill.LogFields{"node": cfg.NodeID}),
		wakes:  make(map[string]*wake),
		loss:   make(map[int]func(error)),
		stop:   make(chan struct{}),
	}
	inner, err := wsql.NewPublisher(wsql.BeginnerFromPgx(pool), wsql.PublisherConfig{SchemaAdapter: t.schema}, t.logger)
	if err != nil {
		return nil, fmt.Errorf("sqltransport: %w", err)
	}
	t.publisher = &publisher{t: t, inner: inner}
	t.commands = &subscriber{t: t, poll: cfg.PollInterval}
	t.replies = &subscriber{t: t, poll: cfg.ReplyPollInterval}

	lctx, cancel := context.WithCancel(context.Background())
	t.cancel = cancel
	if !cfg.DisableNotify {
		conn, err := t.connectListener(ctx)
		if err != nil {
			cancel()
			return nil, fmt.Errorf("sqltransport: LISTEN %s: %w", notifyChannel, err)
		}
		t.wg.Add(1)
		go t.listen(lctx, conn)
	}
	return t, nil
}

// BusConfig returns cfg with the transport's publishers and subscribers
// and its node id set, ready for bus.New. The publisher INSERTs into the
// topic's table (created on first use), committing on its own, with the
// message's context. A command subscription hands over up to 64 messages
// at once, each leased to this node until it is acked. The reply
// subscription polls every
// ReplyPollInterval when no notification wakes it, and is a
// bus.LossNotifier (see the package doc).
func (t *Transport) BusConfig(cfg bus.Config) bus.Config {
	return transport.BusConfig(cfg, t.publisher, t.commands, t.replies, t.cfg.NodeID)
}

// Close ends every subscription, the publisher and the LISTEN connection,
// and waits for their goroutines. Close the buses that use the transport
// first: a message in flight is then acked, where Close leaves it to be
// delivered again. Close does not close the pool.
func (t *Transport) Close() error {
	t.closeOnce.Do(func() {
		close(t.stop)
		t.commands.close()
		t.replies.close()
		_ = t.publisher.inner.Close()
		t.cancel()
		t.wg.Wait()
	})
	return nil
}

func (t *Transport) closed() bool {
	select {
	case <-t.stop:
		return true
	default:
		return false
	}
}

// publisher creates a topic's table before its first message.
type publisher struct {
	t     *Transport
	inner *wsql.Publisher
}

// Publish inserts messages into topic's table in one statement, with the
// context of the first message. When the database cannot be reached (a
// failed connect, a dropped session, a server shutting down), the error
// also matches middleware.ErrUnavailable, as a rejection whose message
// names no server: the cause is wrapped beside it.
func (p *publisher) Publish(topic string, msgs ...*message.Message) error {
	if p.t.closed() {
		return fmt.Errorf("sqltransport: publish: %w", bus.ErrClosed)
	}
	ctx := context.Background()
	if len(msgs) > 0 {
		ctx = msgs[0].Context()
	}
	if err := p.t.initTopic(ctx, topic); err != nil {
		return unavailable(ctx, err)
	}
	err := p.inner.Publish(topic, msgs...)
	if isUndefinedTable(err) {
		// The table is gone although this transport created it: create it
		// again, once.
		p.t.forgetTopic(topic)
		if err := p.t.initTopic(ctx, topic); err != nil {
			return unavailable(ctx, err)
		}
		err = p.inner.Publish(topic, msgs...)
	}
	return insertUnavailable(ctx, err)
}

// isUndefinedTable reports whether err is PostgreSQL's undefined_table.
func isUndefinedTable(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "42P01"
}

// Close closes the publisher; the transport's Close does it too.
func (p *publisher) Close() error { return p.inner.Close() }

// subscriber starts a subscription (see subscription) per Subscribe.
type subscriber struct {
	t    *Transport
	poll time.Duration

	mu     sync.Mutex
	subs   []*subscription
	closed bool
}

// Subscribe creates topic's table if needed and returns its messages,
// until ctx ends or the subscriber or the transport closes.
func (s *subscriber) Subscribe(ctx context.Context, topic string) (<-chan *message.Message, error) {
	if s.t.closed() {
		return nil, fmt.Errorf("sqltransport: subscribe: %w", bus.ErrClosed)
	}
	if err := s.t.initTopic(ctx, topic); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed || s.t.closed() {
		return nil, fmt.Errorf("sqltransport: subscribe: %w", bus.ErrClosed)
	}
	sub := s.t.subscribe(ctx, s, topic)
	s.subs = append(s.subs, sub)
	return sub.out, nil
}

// NotifyLoss makes the subscriber a bus.LossNotifier: f is called with the
// cause each time the transport loses its connection (see
// Transport.ReplySubscriber), until stop.
func (s *subscriber) NotifyLoss(f func(cause error)) (stop func()) {
	t := s.t
	t.lossMu.Lock()
	id := t.lossNext
	t.lossNext++
	t.loss[id] = f
	t.lossMu.Unlock()
	return func() {
		t.lossMu.Lock()
		delete(t.loss, id)
		t.lossMu.Unlock()
	}
}

// lost tells the registered buses that the connection was lost.
func (t *Transport) lost(cause error) {
	t.lossMu.Lock()
	defer t.lossMu.Unlock()
	for _, f := range t.loss {
		f(cause)
	}
}

// Close ends every subscription; the transport's Close does it too.
func (s *subscriber) Close() error {
	s.close()
	return nil
}

// forget drops sub, which ended, from the subscriptions to end.
func (s *subscriber) forget(sub *subscription) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.subs = slices.DeleteFunc(s.subs, func(x *subscription) bool { return x == sub })
}

func (s *subscriber) close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	for _, sub := range s.subs {
		sub.cancel()
	}
	s.subs = nil
}
