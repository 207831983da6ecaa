package sqltransport

import (
	"context"
	"errors"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/jackc/pgx/v5"
)

// A subscription settles its messages: it deletes the acked ones, hands
// the nacked ones back and renews the leases of the others. Every
// statement matches only rows whose claimed_by is the subscription's
// token, so that a subscription whose lease ran out (a node cut off from
// the database for longer than a lease) cannot delete, hand back or renew
// a message another subscription has leased since; a renewal that finds
// a lease lost drops it.

// watch waits for msg's ack or nack and queues it for the settling loop.
// When the subscription ends first, an acked msg is still queued as acked
// (a bus acks what it handled before it ends its subscriptions) and any
// other is left held, to be handed back.
func (s *subscription) watch(l *lease, msg *message.Message) {
	defer s.watching.Done()
	select {
	case <-msg.Acked():
		s.settle(l, true)
	case <-msg.Nacked():
		s.settle(l, false)
	case <-s.ctx.Done():
		select {
		case <-msg.Acked():
			s.settle(l, true)
		default:
		}
	}
}

// settle queues l's ack or nack for the settling loop and wakes it.
func (s *subscription) settle(l *lease, acked bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.queueLocked(l, acked) {
		s.kickLocked()
	}
}

// queueLocked queues l's ack or nack and reports whether it did. A lease
// no longer held (past AckDeadline, or lost) has nothing to hand back, and
// its ack deletes the message only if nobody leased it since.
func (s *subscription) queueLocked(l *lease, acked bool) bool {
	if cur := s.held[l.offset]; cur != l {
		if !acked || cur != nil {
			return false
		}
	}
	l.settled, l.nacked = true, !acked
	if acked {
		s.acked = append(s.acked, l)
	} else {
		s.nack = append(s.nack, l)
	}
	return true
}

func (s *subscription) kickLocked() {
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

func (s *subscription) signalFreedLocked() {
	select {
	case s.freed <- struct{}{}:
	default:
	}
}

// forgetLocked stops holding l.
func (s *subscription) forgetLocked(l *lease) {
	if s.held[l.offset] == l {
		delete(s.held, l.offset)
	}
}

// handBack hands back, in one round trip, leases whose messages were not
// handed over.
func (s *subscription) handBack(leases []*lease) {
	s.mu.Lock()
	for _, l := range leases {
		l.settled, l.nacked = true, true
	}
	s.mu.Unlock()
	ctx, cancel := context.WithTimeout(s.ctx, s.lease)
	defer cancel()
	s.settleBatch(ctx, nil, leases, nil)
}

// settleLoop settles what the watchers queue and renews the leases held,
// until the subscription ends; then, once fetched is closed and every
// watcher has returned, it deletes the last acked messages and hands the
// rest back.
func (s *subscription) settleLoop(fetched <-chan struct{}) {
	defer s.t.wg.Done()
	defer s.owner.forget(s)
	renew := time.NewTicker(s.lease / 3)
	defer renew.Stop()
	for {
		select {
		case <-s.kick:
			s.flushBounded(false)
		case <-renew.C:
			s.flushBounded(true)
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

// handBackHeld queues every held message not settled to be handed back.
func (s *subscription) handBackHeld() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, l := range s.held {
		if !l.settled {
			s.queueLocked(l, false)
		}
	}
}

// flushBounded flushes within a lease: a renewal that would land later
// is worthless, and a stuck round trip must not hold back the next ones.
func (s *subscription) flushBounded(renew bool) {
	ctx, cancel := context.WithTimeout(s.ctx, s.lease)
	defer cancel()
	s.flush(ctx, renew)
}

// flush deletes the acked messages, hands the nacked ones back and, with
// renew, renews the other leases whose messages were handed over less than
// AckDeadline ago, in one round trip. When it fails, nothing of it is
// believed: acks stay queued for the next flush, as do hand-backs while
// their lease lasts, and no lease is extended.
func (s *subscription) flush(ctx context.Context, renew bool) {
	s.mu.Lock()
	acked, nack := s.acked, s.nack
	s.acked, s.nack = nil, nil
	var renewing []*lease
	if renew {
		now := time.Now()
		for o, l := range s.held {
			switch {
			case l.settled:
			case !l.handed.IsZero() && now.Sub(l.handed) >= s.t.cfg.AckDeadline:
				delete(s.held, o)
				s.logger.Info("A message was not acked within AckDeadline; it is delivered again when its lease ends", watermill.LogFields{"offset": o})
			default:
				renewing = append(renewing, l)
			}
		}
	}
	s.mu.Unlock()
	s.settleBatch(ctx, acked, nack, renewing)
}

// settleBatch deletes the messages of acked, hands back those of nack and
// renews renewing, in one round trip; see flush.
func (s *subscription) settleBatch(ctx context.Context, acked, nack, renewing []*lease) {
	if len(acked)+len(nack)+len(renewing) == 0 {
		return
	}
	b := &pgx.Batch{}
	if len(acked) > 0 {
		o, u := ids(acked)
		b.Queue(s.sql.ack, o, u, s.token)
	}
	if len(nack) > 0 {
		o, u := ids(nack)
		b.Queue(s.sql.handBack, o, u, s.token)
		b.Queue(`SELECT pg_notify($1, $2)`, notifyChannel, s.name)
	}
	var kept map[int64]bool // renewed
	if len(renewing) > 0 {
		b.Queue(s.sql.renew, offsetsOf(renewing), s.lease.Microseconds(), s.token).Query(func(rows pgx.Rows) error {
			kept = make(map[int64]bool, len(renewing))
			var o int64
			_, err := pgx.ForEachRow(rows, []any{&o}, func() error {
				kept[o] = true
				return nil
			})
			return err
		})
	}
	start := time.Now()
	err := s.t.pool.SendBatch(ctx, b).Close()
	s.mu.Lock()
	defer s.mu.Unlock()
	defer s.signalFreedLocked()
	if err != nil {
		if !errors.Is(ctx.Err(), context.Canceled) {
			s.logger.Error("Cannot settle messages; acks are retried, leases not renewed run out", err,
				watermill.LogFields{"acked": len(acked), "nacked": len(nack), "renewing": len(renewing)})
		}
		s.acked = append(s.acked, acked...)
		now := time.Now()
		for _, l := range nack {
			if s.held[l.offset] == l && now.Before(l.until) {
				s.nack = append(s.nack, l)
			} else {
				s.forgetLocked(l)
			}
		}
		return
	}
	for _, l := range acked {
		s.forgetLocked(l)
	}
	for _, l := range nack {
		s.forgetLocked(l)
	}
	until := start.Add(s.lease)
	for _, l := range renewing {
		if kept[l.offset] {
			l.until = until
		} else if s.held[l.offset] == l {
			delete(s.held, l.offset)
			s.logger.Info("A lease was lost (another consumer leased the message, or it was deleted); it is not renewed again", watermill.LogFields{"offset": l.offset})
		}
	}
}

// offsetsOf returns the offsets of leases.
func offsetsOf(leases []*lease) []int64 {
	o := make([]int64, len(leases))
	for i, l := range leases {
		o[i] = l.offset
	}
	return o
}

// ids returns the offsets and uuids of leases: deletes and hand-backs match
// both, so that a lease taken before its table was dropped and created
// again cannot settle a new message at the same offset.
func ids(leases []*lease) ([]int64, []string) {
	u := make([]string, len(leases))
	for i, l := range leases {
		u[i] = l.uuid
	}
	return offsetsOf(leases), u
}
