package sqltransport

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"slices"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/jackc/pgx/v5"

	"github.com/claimbus/claimbus/internal/pgerr"
)

const (
	// fetchLimit is how many messages of one subscription may be leased
	// and not yet acked at once; one query takes up to that many.
	fetchLimit = 64
	// maxLease is the longest lease a subscription takes on a message
	// (a third of AckDeadline when that is shorter): a node that dies
	// stops renewing, and its messages are delivered again once it ends.
	maxLease = 5 * time.Second
	// closeTimeout bounds the last acks and hand-backs of a subscription
	// that ends.
	closeTimeout = 5 * time.Second
	// handOverGrace is how long a consumer may take to accept a message
	// and still count as ready for more: the next fetch leases no more
	// than the consumer took so.
	handOverGrace = time.Millisecond
	// handOverPatience is how much longer a subscription waits for a busy
	// consumer to accept a message before it hands back the messages
	// leased after that one, for other consumers.
	handOverPatience = 10 * time.Millisecond
)

// subscription is one Subscribe of a topic. It leases the oldest messages
// nobody holds to itself (claimed_until, and its token in claimed_by), in
// one statement, no more at a time than its consumer has lately taken
// without waiting, and hands them over; it holds no connection while its
// consumer handles them. A settling loop deletes the acked messages, hands
// the nacked ones back and renews the other leases, in one round trip for
// every message waiting for it (see settle.go).
type subscription struct {
	t      *Transport
	owner  *subscriber
	name   string // unquoted table name, the payload of its notifications
	sql    statements
	token  string // claimed_by of the rows this subscription leases
	wake   *wake
	poll   time.Duration
	lease  time.Duration
	ctx    context.Context // ends with the caller's context or the transport
	cancel context.CancelFunc
	out    chan *message.Message
	logger watermill.LoggerAdapter

	mu    sync.Mutex
	held  map[int64]*lease // by offset: leased by this subscription
	acked []*lease         // acked, not yet deleted
	nack  []*lease         // nacked or to hand back, not yet handed back
	kick  chan struct{}    // 1: acks or nacks wait for the settling loop
	freed chan struct{}    // 1: room under fetchLimit since the last fetch

	watching sync.WaitGroup // the goroutines that wait for a message's ack
}

// lease is a subscription's hold on one message. The subscription's mu
// guards its fields.
type lease struct {
	offset int64
	uuid   string // the message's: a table created again reuses offsets
	// until is when the lease surely lasts to: the local time at which
	// the query that took or last renewed it was sent, plus the lease.
	// The database's lease starts later, when the query runs.
	until time.Time
	// handed is when the consumer took the message: AckDeadline counts
	// from it. Zero until then.
	handed  time.Time
	settled bool // acked, nacked or handed back: never renewed again
	nacked  bool // nacked or handed back
}

// subscribe starts a subscription of topic's table, which exists, for
// owner; it ends when ctx ends or its cancel is called.
func (t *Transport) subscribe(ctx context.Context, owner *subscriber, topic string) *subscription {
	ctx, cancel := context.WithCancel(ctx)
	table := tableName(t.cfg.TablePrefix, topic)
	s := &subscription{
		t:      t,
		owner:  owner,
		name:   table,
		sql:    newStatements(quote(table)),
		token:  newToken(t.cfg.NodeID),
		wake:   t.wakeFor(table),
		poll:   owner.poll,
		lease:  min(t.cfg.AckDeadline/3, maxLease),
		ctx:    ctx,
		cancel: cancel,
		out:    make(chan *message.Message),
		logger: t.logger.With(watermill.LogFields{"topic": topic}),
		held:   make(map[int64]*lease),
		kick:   make(chan struct{}, 1),
		freed:  make(chan struct{}, 1),
	}
	fetched := make(chan struct{})
	t.wg.Add(2)
	go s.fetchLoop(fetched)
	go s.settleLoop(fetched)
	return s
}

// statements are a subscription's queries of its table ($1, $2...):
// fetch takes up to $1 rows for $2 microseconds under token $3; ack
// deletes and handBack hands back the rows of offsets $1 and uuids $2
// under token $3; renew extends the lease of the rows of offsets $1 by $2
// microseconds under token $3, returning the offsets it extended.
type statements struct{ fetch, ack, handBack, renew string }

func newStatements(table string) statements {
	return statements{
		fetch: `UPDATE ` + table + ` SET claimed_until = now() + $2::bigint * interval '1 microsecond', claimed_by = $3
			WHERE "offset" IN (SELECT "offset" FROM ` + table + ` WHERE claimed_until < now() ORDER BY "offset" LIMIT $1 FOR UPDATE SKIP LOCKED)
			RETURNING "offset", uuid, payload, metadata`,
		ack: `DELETE FROM ` + table + ` WHERE "offset" = ANY($1) AND uuid = ANY($2) AND claimed_by = $3`,
		handBack: `UPDATE ` + table + ` SET claimed_until = '-infinity', claimed_by = NULL
			WHERE "offset" = ANY($1) AND uuid = ANY($2) AND claimed_by = $3`,
		renew: `UPDATE ` + table + ` SET claimed_until = now() + $2::bigint * interval '1 microsecond'
			WHERE "offset" = ANY($1) AND claimed_by = $3 RETURNING "offset"`,
	}
}

// newToken returns a lease token unique to one subscription: the node's
// id, for whoever reads the table, and random bytes.
func newToken(nodeID string) string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return nodeID + "/" + hex.EncodeToString(b[:])
}

// fetchLoop leases messages and hands them over until the subscription
// ends, then closes out and fetched. It leases no more at once than the
// consumer took without waiting last time (doubling while it takes all),
// so that the messages a busy consumer cannot take stay free for others.
func (s *subscription) fetchLoop(fetched chan<- struct{}) {
	defer s.t.wg.Done()
	defer close(fetched)
	defer close(s.out)
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	window := fetchLimit
	for s.ctx.Err() == nil {
		s.mu.Lock()
		room := fetchLimit - len(s.held)
		s.mu.Unlock()
		if room <= 0 {
			select {
			case <-s.freed:
			case <-s.ctx.Done():
			}
			continue
		}
		n := min(room, window)
		woken := s.wake.state() // closed by a notification from now on
		leases, msgs, taken, err := s.fetch(n)
		if err != nil {
			s.failed(err)
			continue
		}
		ready, handedBack := s.handOver(leases, msgs, timer)
		switch {
		case ready < len(msgs):
			window = max(ready, 1)
		case taken == n:
			window = min(2*window, fetchLimit)
		}
		if taken < n && !handedBack {
			// The table held no more: wait for a notification of a
			// message committed since the fetch began, or the poll.
			s.sleep(s.poll, woken)
		}
	}
}

// fetch leases up to n messages nobody holds to this subscription, oldest
// first, and returns them with their leases and how many rows it took (a
// row that does not parse is taken and deleted, not returned; one this
// subscription still holds, its lease having run out meanwhile, is only
// held longer).
func (s *subscription) fetch(n int) ([]*lease, []*message.Message, int, error) {
	start := time.Now()
	rows, err := s.t.pool.Query(s.ctx, s.sql.fetch, n, s.lease.Microseconds(), s.token)
	if err != nil {
		return nil, nil, 0, err
	}
	type row struct {
		offset   int64
		uuid     string
		payload  []byte
		metadata []byte
	}
	var got []row
	var r row
	_, err = pgx.ForEachRow(rows, []any{&r.offset, &r.uuid, &r.payload, &r.metadata}, func() error {
		got = append(got, r)
		return nil
	})
	if err != nil {
		return nil, nil, 0, err
	}
	slices.SortFunc(got, func(a, b row) int { return cmp.Compare(a.offset, b.offset) })
	until := start.Add(s.lease)
	leases := make([]*lease, 0, len(got))
	msgs := make([]*message.Message, 0, len(got))
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, r := range got {
		if l := s.held[r.offset]; l != nil && !l.nacked && l.uuid == r.uuid {
			// Its renewals were late, or its ack is not yet deleted, but
			// nobody took it: its consumer has it.
			l.until = until
			continue
		}
		l := &lease{offset: r.offset, uuid: r.uuid, until: until}
		s.held[r.offset] = l
		msg := message.NewMessage(r.uuid, r.payload)
		if len(r.metadata) > 0 {
			if err := json.Unmarshal(r.metadata, &msg.Metadata); err != nil {
				// A row no publisher of the transport writes: handed to
				// nobody, and deleted.
				s.logger.Error("Dropped a message whose metadata does not parse", err, watermill.LogFields{"offset": r.offset})
				s.queueLocked(l, true)
				continue
			}
		}
		msg.SetContext(s.ctx)
		leases = append(leases, l)
		msgs = append(msgs, msg)
	}
	if len(s.acked) > 0 {
		s.kickLocked()
	}
	return leases, msgs, len(got), nil
}

// handOver hands msgs over in order, each while its lease lasts, and
// returns how many the consumer took within handOverGrace each, before one
// it did not. When the consumer keeps a message waiting handOverPatience
// longer still, the messages after it are handed back, and that one is
// handed over when the consumer takes it.
func (s *subscription) handOver(leases []*lease, msgs []*message.Message, timer *time.Timer) (ready int, handedBack bool) {
	busy := false
	for i, msg := range msgs {
		if !busy {
			switch s.offer(leases[i], msg, timer, handOverGrace) {
			case offerTaken:
				ready++
				continue
			case offerLost:
				continue
			case offerEnded:
				return ready, false
			}
			busy = true
		}
		switch s.offer(leases[i], msg, timer, handOverPatience) {
		case offerTaken, offerLost:
			continue
		case offerEnded:
			return ready, handedBack
		}
		if rest := leases[i+1:]; len(rest) > 0 {
			s.handBack(rest)
			handedBack = true
		}
		s.offer(leases[i], msg, timer, 0)
		return ready, handedBack
	}
	return ready, handedBack
}

// offer outcomes.
const (
	offerTaken   = iota // the consumer took the message
	offerWaiting        // the grace passed first
	offerLost           // its lease ended first: not handed over
	offerEnded          // the subscription ended first
)

// offer waits for the consumer to take msg while l lasts, and for at most
// grace when grace is not 0.
func (s *subscription) offer(l *lease, msg *message.Message, timer *time.Timer, grace time.Duration) int {
	var graceEnd time.Time
	for {
		s.mu.Lock()
		held, until := s.held[l.offset] == l && !l.settled, l.until
		s.mu.Unlock()
		if !held {
			return offerLost // found lost by a renewal, which logged it
		}
		select {
		case s.out <- msg:
			s.handed(l, msg)
			return offerTaken
		default:
		}
		now := time.Now()
		if !now.Before(until) {
			s.drop(l, "A lease ended before its consumer took the message, which is delivered again")
			return offerLost
		}
		wait := until.Sub(now)
		if grace > 0 {
			if graceEnd.IsZero() {
				graceEnd = now.Add(grace)
			}
			if !now.Before(graceEnd) {
				return offerWaiting
			}
			wait = min(wait, graceEnd.Sub(now))
		}
		timer.Reset(wait)
		select {
		case s.out <- msg:
			timer.Stop()
			s.handed(l, msg)
			return offerTaken
		case <-timer.C:
		case <-s.ctx.Done():
			timer.Stop()
			return offerEnded
		}
	}
}

// handed starts AckDeadline for l, whose message the consumer took, and
// watches for its ack.
func (s *subscription) handed(l *lease, msg *message.Message) {
	s.mu.Lock()
	l.handed = time.Now()
	s.mu.Unlock()
	s.watching.Add(1)
	go s.watch(l, msg)
}

// drop forgets l, which is not renewed again, and logs why.
func (s *subscription) drop(l *lease, why string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.held[l.offset] == l {
		delete(s.held, l.offset)
		s.signalFreedLocked()
	}
	s.logger.Info(why, watermill.LogFields{"offset": l.offset})
}

// failed logs a query's failure and waits RetryInterval. With
// DisableNotify a connection error is the first sign of a lost connection
// (no LISTEN connection sees it), so it tells the buses.
func (s *subscription) failed(err error) {
	if s.ctx.Err() != nil {
		return
	}
	s.logger.Error("Error querying for messages", err, watermill.LogFields{"wait_time": s.t.cfg.RetryInterval})
	if s.t.cfg.DisableNotify && pgerr.IsConnectionError(s.ctx, err) {
		s.t.lost(err)
	}
	s.sleep(s.t.cfg.RetryInterval, nil)
}

// sleep waits d, or until woken is closed or the subscription ends.
func (s *subscription) sleep(d time.Duration, woken <-chan struct{}) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-woken:
	case <-s.ctx.Done():
	}
}
