package postgres

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/claimbus/claimbus/lockstore"
)

// States of a pgLock.
const (
	lockHeld int32 = iota
	lockReleasing
	lockReleased
	lockLost
)

// pgLock is one grant of a session advisory lock on a lock connection.
type pgLock struct {
	c     *lockConn
	gen   uint64 // the connection it lives on
	key   lockstore.Key
	id    LockID
	token int64
	at    time.Time
	state atomic.Int32
	lost  chan struct{}
}

var _ lockstore.Lock = (*pgLock)(nil)

// Key is the key this lock holds.
func (l *pgLock) Key() lockstore.Key { return l.key }

// Token is the fencing token drawn from the store's sequence in the same
// statement that took the lock: greater than every token granted before,
// on any node.
func (l *pgLock) Token() int64 { return l.token }

// AcquiredAt is when this node received the grant.
func (l *pgLock) AcquiredAt() time.Time { return l.at }

// Lost is closed when the lock connection holding this lock fails (the
// server has then freed the lock) or the store is closed.
func (l *pgLock) Lost() <-chan struct{} { return l.lost }

// Release runs pg_advisory_unlock on the lock connection and waits for the
// server's answer, whatever ctx says: the unlock runs under the store's
// context and Config.Timeout bounds it (a round trip that takes longer
// closes the connection, which frees the lock too), so a release is never
// cut short by a caller going away, and once Release returns the key can be
// taken again. An unlock the server answers with false means the
// connection is in doubt: the store closes it and Release returns an error
// matching lockstore.ErrLockLost. Release is idempotent, and a lock already
// lost releases to nil.
func (l *pgLock) Release(context.Context) error {
	if !l.state.CompareAndSwap(lockHeld, lockReleasing) {
		return nil
	}
	r := &request{kind: unlockRequest, id: l.id, lock: l, done: make(chan struct{})}
	if err := l.c.submit(r); err != nil {
		// Every error of submit means the connection the lock lived on is
		// gone (ErrClosed, errStaleLock) or down (ErrUnavailable): the
		// server frees the lock with that session, and the owner goroutine
		// ends it (lost, or released as it is releasing now). There is
		// nothing left to unlock, so Release succeeds, as documented.
		return nil //nolint:nilerr // a lock whose connection is gone is lost, and a lost lock releases to nil
	}
	<-r.done
	return r.err
}

// end ends a lock whose connection has closed (the server freed it with the
// session): a held lock is lost, one being released is released. The turn
// passes on.
func (l *pgLock) end() {
	if l.state.CompareAndSwap(lockHeld, lockLost) {
		close(l.lost)
	} else {
		l.state.Store(lockReleased)
	}
	l.c.s.queue.pass(l.id)
}

// connFor is the lock connection that serves id: the same one for as long
// as the store lives, so that the turn queue and the session agree.
func (s *Store) connFor(id LockID) *lockConn {
	return s.conns[mixLockID(id)>>32%uint64(len(s.conns))]
}

// TryLock takes key now, or fails with lockstore.ErrLocked when another
// claimant holds it, on this node or any other. It fails fast with an error
// matching lockstore.ErrUnavailable while key's lock connection is being
// replaced.
func (s *Store) TryLock(ctx context.Context, key lockstore.Key) (lockstore.Lock, error) {
	id, err := s.begin(ctx, key)
	if err != nil {
		return nil, err
	}
	if !s.queue.tryTake(id) {
		return nil, fmt.Errorf("%w: %s (held or being taken on this node)", lockstore.ErrLocked, key)
	}
	l, err := s.attempt(ctx, s.connFor(id), key, id)
	if err != nil {
		return nil, err
	}
	if l == nil {
		s.queue.pass(id)
		return nil, fmt.Errorf("%w: %s", lockstore.ErrLocked, key)
	}
	return l, nil
}

// Lock waits until key is free or ctx ends. Claimants on this node are
// served first come first served: only the first one talks to the server,
// and while another node holds the key it polls pg_try_advisory_lock,
// after 1ms and then twice as long each time up to Config.PollInterval, so
// that a wait never blocks a lock connection shared with other keys. It
// fails fast with an error matching lockstore.ErrUnavailable while key's
// lock connection is being replaced, and with lockstore.ErrClosed when the
// store closes.
func (s *Store) Lock(ctx context.Context, key lockstore.Key) (lockstore.Lock, error) {
	id, err := s.begin(ctx, key)
	if err != nil {
		return nil, err
	}
	if err := s.queue.take(ctx, s.ctx.Done(), id); err != nil {
		return nil, err
	}
	c := s.connFor(id)
	var timer *time.Timer
	delay := min(firstPollInterval, s.cfg.PollInterval)
	for {
		l, err := s.attempt(ctx, c, key, id)
		if err != nil {
			return nil, err
		}
		if l != nil {
			return l, nil
		}
		if timer == nil {
			timer = time.NewTimer(delay)
			defer timer.Stop()
		} else {
			timer.Reset(delay)
		}
		select {
		case <-timer.C:
		case <-ctx.Done():
			s.queue.pass(id)
			return nil, ctx.Err()
		case <-s.ctx.Done():
			s.queue.pass(id)
			return nil, lockstore.ErrClosed
		}
		delay = min(2*delay, s.cfg.PollInterval)
	}
}

// begin checks a TryLock or Lock call before it queues.
func (s *Store) begin(ctx context.Context, key lockstore.Key) (LockID, error) {
	if err := s.checkOpen(); err != nil {
		return LockID{}, err
	}
	id, err := s.lockID(key)
	if err != nil {
		return LockID{}, err
	}
	return id, ctx.Err()
}

// attempt sends one try-lock for id, whose turn the caller holds. It
// returns the lock when granted; nil and no error when another node holds
// the key (the caller still holds the turn); an error otherwise, and then
// the turn has been passed on (here, or by the owner goroutine once the
// result of an abandoned try arrives and, if it was a grant, is unlocked).
func (s *Store) attempt(ctx context.Context, c *lockConn, key lockstore.Key, id LockID) (*pgLock, error) {
	r := &request{kind: lockRequest, id: id, key: key, done: make(chan struct{})}
	if err := c.submit(r); err != nil {
		s.queue.pass(id)
		return nil, err
	}
	select {
	case <-r.done:
	case <-ctx.Done():
		if r.state.CompareAndSwap(requestPending, requestAbandoned) {
			return nil, ctx.Err()
		}
		<-r.done // the result is being delivered: it came first
	}
	if r.err != nil {
		s.queue.pass(id)
		return nil, r.err
	}
	return r.result, nil
}

// Waiting returns how many claimants on this node wait in key's queue
// (behind the one holding or taking it). It is for tests and metrics.
func (s *Store) Waiting(key lockstore.Key) int {
	id, err := s.lockID(key)
	if err != nil {
		return 0
	}
	return s.queue.waiting(id)
}
