package lockstore

import (
	"context"
	"fmt"
	"time"

	"github.com/claimbus/claimbus/internal/afterlost"
	"github.com/claimbus/claimbus/internal/keyqueue"
)

// lockState is where a memLock is in its life.
type lockState uint8

const (
	held     lockState = iota + 1 // in its shard's table, the key's holder
	released                      // ended by its own Release
	lost                          // ended by lease expiry, Reset or Close
)

// memLock is one grant of a Memory. Its fields up to at never change after
// the grant; state and ext are guarded by the shard's mutex. A held memLock
// is in its shard's table. It is the only allocation of an uncontended
// TryLock, so what only some locks need lives in ext.
type memLock struct {
	shard *memShard
	key   Key
	token int64
	at    time.Duration // since shard.m.base

	// hash (32 bits, see Memory.hash) and state share one word, and after
	// is one: the lock is 80 bytes, an allocation size class below 96.
	hash  uint32
	state lockState
	ext   *lockExt
	// after holds the AfterLost registrations while the lock is held.
	after afterlost.List
}

// lockExt is the part of a lock made when first needed: by Lost, by a
// waiter queuing, by a lease.
type lockExt struct {
	// lost is made by the first call to Lost, and closed when the lock is
	// lost.
	lost chan struct{}
	// queue holds the key's waiters while the lock is held.
	queue keyqueue.List[memWait]
	lease *lease
}

// lease is one scheduled end of a lock; Refresh replaces it with a new one.
type lease struct {
	timer Timer
}

var (
	_ Lock              = (*memLock)(nil)
	_ Refresher         = (*memLock)(nil)
	_ afterlost.Watcher = (*memLock)(nil)
)

// extension returns l.ext, making it first if needed. The caller holds the
// shard's mutex.
func (l *memLock) extension() *lockExt {
	if l.ext == nil {
		l.ext = &lockExt{}
	}
	return l.ext
}

// Key is the key this lock holds.
func (l *memLock) Key() Key { return l.key }

// TableKey is the key of the lock in its shard's table.
func (l *memLock) TableKey() Key { return l.key }

// Token is the fencing token of this grant.
func (l *memLock) Token() int64 { return l.token }

// AcquiredAt is when the store's clock granted the lock.
func (l *memLock) AcquiredAt() time.Time { return l.shard.m.base.Add(l.at) }

// Lost is closed when the lock ends by lease expiry, Reset or Close. It is
// never closed by the lock's own Release.
func (l *memLock) Lost() <-chan struct{} {
	s := l.shard
	s.mu.Lock()
	defer s.mu.Unlock()
	e := l.extension()
	if e.lost == nil {
		e.lost = make(chan struct{})
		if l.state == lost {
			close(e.lost)
		}
	}
	return e.lost
}

// WatchLost registers n to be fired when the lock is lost.
func (l *memLock) WatchLost(n *afterlost.Node) {
	s := l.shard
	s.mu.Lock()
	state := l.state
	if state == held {
		l.after.Push(n)
	}
	s.mu.Unlock()
	if state == lost {
		n.FireLater()
	}
}

// Release gives the key to its next waiter, or frees it, and returns nil.
// On a lock the store ended (lease expiry, Reset, Close) it does nothing
// and returns an error wrapping ErrLockLost, and ErrClosed too once the
// store is closed, each time it is called; on a lock already released, nil.
func (l *memLock) Release(context.Context) error {
	s := l.shard
	s.mu.Lock()
	switch l.state {
	case held:
		s.end(l, released)
	case lost:
		closed := s.closed
		s.mu.Unlock()
		return l.lostError("release", closed)
	}
	s.mu.Unlock()
	return nil
}

// Refresh extends the lease by one TTL from now. On a store without TTL it
// only reports whether the lock is still held. It fails with ErrLockLost on a
// lock that was released or lost (and with ErrClosed too once the store is
// closed).
func (l *memLock) Refresh(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s := l.shard
	s.mu.Lock()
	defer s.mu.Unlock()
	if l.state != held {
		return l.lostError("refresh", s.closed)
	}
	if s.m.ttl > 0 {
		s.stopLease(l.ext)
		s.startLease(l)
	}
	return nil
}

// lostError is the error of op on l once l is no longer held: it wraps
// ErrLockLost, and ErrClosed too when closed (the store is).
func (l *memLock) lostError(op string, closed bool) error {
	if closed {
		return fmt.Errorf("lockstore: %s %s: %w: %w", op, l.key, ErrLockLost, ErrClosed)
	}
	return fmt.Errorf("lockstore: %s %s: %w", op, l.key, ErrLockLost)
}

// failWaiters fails every waiter queued on the lock with err. The caller
// holds the shard's mutex.
func (e *lockExt) failWaiters(err error) {
	for w := range e.queue.All {
		w.Value.state = failed
		w.Value.err = err
		close(w.Value.ready)
	}
	e.queue = keyqueue.List[memWait]{}
}

// waitState is where a waiter is: queued, or out of the queue with a grant
// or an error.
type waitState uint8

const (
	waiting waitState = iota
	granted
	failed
)

// waiter is one Lock call queued on a held key, in its holder's queue.
type waiter = keyqueue.Waiter[memWait]

// memWait is what a waiter carries. Its lock, with ext as its extension,
// is filled in and returned to the caller when the key is handed to it.
// The other fields are guarded by the shard's mutex; ready is closed when
// state leaves waiting.
type memWait struct {
	lock  memLock
	ext   lockExt
	ready chan struct{}
	state waitState
	err   error
}
