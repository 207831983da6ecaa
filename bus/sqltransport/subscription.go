package sqltransport

import (
	"cmp"
	"context"
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
	// fetchLimit is how many messages of one subscription may be handed
	// over and not yet acked at once; one query takes up to that many.
	fetchLimit = 64
	// maxLease is the longest lease a subscription takes on a message
	// (a third of AckDeadline when that is shorter): a node that dies
	// stops renewing, and its messages are delivered again once it ends.
	maxLease = 5 * time.Second
	// closeTimeout bounds the last acks and hand-backs of a subscription
	// that ends.
	closeTimeout = 5 * time.Second
)

// subscription is one Subscribe of a topic. It takes the oldest messages
// nobody holds, in one statement that leases them to this node
// (claimed_until), and hands them over; it holds no connection while its
// consumer handles them. A settling loop then deletes the acked messages,
// hands the nacked ones back, and renews the lease of the rest, each in
// one round trip for every message waiting for it. A message unacked
// after AckDeadline is no longer renewed, so that another consumer gets
// it when its lease ends.
type subscription struct {
	t      *Transport
	table  string // quoted
	wake   *wake
	poll   time.Duration
	lease  time.Duration
	ctx    context.Context // ends with the caller's context or the transport
	cancel context.CancelFunc
	out    chan *message.Message
	logger watermill.LoggerAdapter

	mu    sync.Mutex
	held  map[int64]time.Time // offset → handed over at; leased by this node
	acked []int64             // held, acked, not yet deleted
	nack  []int64             // held, nacked, not yet handed back
	kick  chan struct{}       // 1: acks or nacks wait for the settling loop
	freed chan struct{}       // 1: room under fetchLimit since the last fetch

	watching sync.WaitGroup // the goroutines that wait for a message's ack
}

// subscribe starts a subscription of topic's table, which exists.
func (t *Transport) subscribe(ctx context.Context, topic string, poll time.Duration) *subscription {
	ctx, cancel := context.WithCancel(ctx)
	table := tableName(t.cfg.TablePrefix, topic)
	s := &subscription{
		t:      t,
		table:  quote(table),
		wake:   t.wakeFor(table),
		poll:   poll,
		lease:  min(t.cfg.AckDeadline/3, maxLease),
		ctx:    ctx,
		cancel: cancel,
		out:    make(chan *message.Message),
		logger: t.logger.With(watermill.LogFields{"topic": topic}),
		held:   make(map[int64]time.Time),
		kick:   make(chan struct{}, 1),
		freed:  make(chan struct{}, 1),
	}
	t.wg.Add(2)
	go func() {
		defer t.wg.Done()
		select {
		case <-t.stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	fetched := make(chan struct{})
	go s.fetchLoop(fetched)
	t.wg.Add(1)
	go s.settleLoop(fetched)
	return s
}

// fetchLoop takes messages and hands them over until the subscription
// ends, then closes out and fetched.
func (s *subscription) fetchLoop(fetched chan<- struct{}) {
	defer s.t.wg.Done()
	defer close(fetched)
	defer close(s.out)
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
		_, woken := s.wake.state() // closed by a notification from now on
		msgs, taken, err := s.fetch(room)
		if err != nil {
			s.failed(err)
			continue
		}
		for _, m := range msgs {
			select {
			case s.out <- m:
			case <-s.ctx.Done():
				// Not handed over: its watcher hands it back.
			}
		}
		if taken < room {
			// The table held no more: wait for a notification of a
			// message committed since the fetch began, or the poll.
			s.sleep(s.poll, woken)
		}
	}
}

// fetch leases up to n messages nobody holds to this node, oldest first,
// starts a watcher for each and returns them, with how many rows it took
// (a row that does not parse is taken and deleted, not returned).
func (s *subscription) fetch(n int) ([]*message.Message, int, error) {
	rows, err := s.t.pool.Query(s.ctx, `UPDATE `+s.table+` SET claimed_until = now() + $2::bigint * interval '1 microsecond'
		WHERE "offset" IN (SELECT "offset" FROM `+s.table+` WHERE claimed_until < now() ORDER BY "offset" LIMIT $1 FOR UPDATE SKIP LOCKED)
		RETURNING "offset", uuid, payload, metadata`, n, s.lease.Microseconds())
	if err != nil {
		return nil, 0, err
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
		return nil, 0, err
	}
	slices.SortFunc(got, func(a, b row) int { return cmp.Compare(a.offset, b.offset) })
	now := time.Now()
	msgs := make([]*message.Message, 0, len(got))
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, r := range got {
		msg := message.NewMessage(r.uuid, r.payload)
		if len(r.metadata) > 0 {
			if err := json.Unmarshal(r.metadata, &msg.Metadata); err != nil {
				// A row no publisher of the transport writes: handed to
				// nobody, and deleted.
				s.logger.Error("Dropped a message whose metadata does not parse", err, watermill.LogFields{"offset": r.offset})
				s.acked = append(s.acked, r.offset)
				s.held[r.offset] = now
				continue
			}
		}
		msg.SetContext(s.ctx)
		s.held[r.offset] = now
		s.watching.Add(1)
		go s.watch(r.offset, msg)
		msgs = append(msgs, msg)
	}
	if len(msgs) < len(got) {
		s.kickLocked()
	}
	return msgs, len(got), nil
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

// watch waits for msg's ack or nack and queues it for the settling loop.
// When the subscription ends first, an acked msg is still queued as acked
// (a bus acks what it handled before it ends its subscriptions) and any
// other is left held, to be handed back.
func (s *subscription) watch(offset int64, msg *message.Message) {
	defer s.watching.Done()
	select {
	case <-msg.Acked():
		s.settle(offset, true)
	case <-msg.Nacked():
		s.settle(offset, false)
	case <-s.ctx.Done():
		select {
		case <-msg.Acked():
			s.settle(offset, true)
		default:
		}
	}
}

func (s *subscription) settle(offset int64, acked bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.held[offset]; !ok {
		// Past AckDeadline: no longer leased, maybe delivered again. An
		// ack still deletes it; a nack has nothing to hand back.
		if !acked {
			return
		}
		s.held[offset] = time.Time{}
	}
	if acked {
		s.acked = append(s.acked, offset)
	} else {
		s.nack = append(s.nack, offset)
	}
	s.kickLocked()
}

func (s *subscription) kickLocked() {
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

// settleLoop settles what the watchers queue and renews the leases held,
// until the subscription ends; then, once fetched is closed and every
// watcher has returned, it deletes the last acked messages and hands the
// rest back.
func (s *subscription) settleLoop(fetched <-chan struct{}) {
	defer s.t.wg.Done()
	renew := time.NewTicker(s.lease / 3)
	defer renew.Stop()
	for {
		select {
		case <-s.kick:
			s.flush(s.ctx, false)
		case <-renew.C:
			s.flush(s.ctx, true)
		case <-s.ctx.Done():
			<-fetched
			s.watching.Wait()
			ctx, cancel := context.WithTimeout(context.Background(), closeTimeout)
			s.handBackHeld()
			s.flush(ctx, false)
			cancel()
			return
		}
	}
}

// handBackHeld queues every held message not acked to be handed back.
func (s *subscription) handBackHeld() {
	s.mu.Lock()
	defer s.mu.Unlock()
	acked := make(map[int64]bool, len(s.acked))
	for _, o := range s.acked {
		acked[o] = true
	}
	for o := range s.held {
		if !acked[o] && !slices.Contains(s.nack, o) {
			s.nack = append(s.nack, o)
		}
	}
}

// flush deletes the acked messages, hands the nacked ones back and, with
// renew, renews the lease of the others younger than AckDeadline, in one
// round trip. Acks that fail stay queued for the next flush; a hand-back
// or renewal that fails lets the lease run out instead.
func (s *subscription) flush(ctx context.Context, renew bool) {
	s.mu.Lock()
	acked, nack := s.acked, s.nack
	s.acked, s.nack = nil, nil
	var renewing []int64
	if renew {
		now := time.Now()
		for o, at := range s.held {
			if at.IsZero() {
				continue
			}
			if now.Sub(at) >= s.t.cfg.AckDeadline {
				delete(s.held, o)
				s.logger.Info("A message was not acked within AckDeadline; it is delivered again when its lease ends", watermill.LogFields{"offset": o})
				continue
			}
			renewing = append(renewing, o)
		}
	}
	s.mu.Unlock()
	if len(acked)+len(nack)+len(renewing) == 0 {
		return
	}
	b := &pgx.Batch{}
	if len(acked) > 0 {
		b.Queue(`DELETE FROM `+s.table+` WHERE "offset" = ANY($1)`, acked)
	}
	if len(nack) > 0 {
		b.Queue(`UPDATE `+s.table+` SET claimed_until = '-infinity' WHERE "offset" = ANY($1)`, nack)
	}
	if len(renewing) > 0 {
		b.Queue(`UPDATE `+s.table+` SET claimed_until = now() + $2::bigint * interval '1 microsecond' WHERE "offset" = ANY($1)`,
			renewing, s.lease.Microseconds())
	}
	err := s.t.pool.SendBatch(ctx, b).Close()
	s.mu.Lock()
	defer s.mu.Unlock()
	if err != nil {
		if ctx.Err() == nil {
			s.logger.Error("Cannot settle messages; acks are retried, the rest is delivered again when its lease ends", err,
				watermill.LogFields{"acked": len(acked), "nacked": len(nack)})
		}
		s.acked = append(s.acked, acked...)
	} else {
		for _, o := range acked {
			delete(s.held, o)
		}
	}
	for _, o := range nack {
		delete(s.held, o)
	}
	select {
	case s.freed <- struct{}{}:
	default:
	}
}
