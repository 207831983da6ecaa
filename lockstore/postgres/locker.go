package postgres

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cenkalti/backoff/v5"

	"github.com/claimbus/claimbus/internal/afterlost"
	"github.com/claimbus/claimbus/internal/lockext"
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
	// lostErr says why the lock was lost; it is set before state becomes
	// lockLost.
	lostErr error
	// afterMu guards after, the AfterLost registrations while the lock is
	// not lost.
	afterMu sync.Mutex
	after   afterlost.List
}

var (
	_ lockstore.Lock                                = (*pgLock)(nil)
	_ lockext.LaterReleaser                         = (*pgLock)(nil)
	_ lockext.Prober[lockstore.Key, lockstore.Lock] = (*Store)(nil)
	_ afterlost.Watcher                             = (*pgLock)(nil)
)

// Key is the key this lock holds.
func (l *pgLock) Key() lockstore.Key { return l.key }

// Token is the fencing token drawn from the store's sequence in the same
// statement that took the lock: greater than every token granted before,
// on any node, across restarts and crash recovery of the server (see
// docs/lockstore.md#losing-a-lock-the-contract).
func (l *pgLock) Token() int64 { return l.token }

// AcquiredAt is when this node received the grant.
func (l *pgLock) AcquiredAt() time.Time { return l.at }

// Lost is closed when the lock can no longer be believed held: its lock
// connection failed or went LeaseBound without a confirmed round trip (the
// store then closes the connection, so the server frees the lock), or the
// store closed.
func (l *pgLock) Lost() <-chan struct{} { return l.lost }

// WatchLost registers n to be fired when the lock is lost.
func (l *pgLock) WatchLost(n *afterlost.Node) {
	l.afterMu.Lock()
	state := l.state.Load()
	if state == lockHeld || state == lockReleasing {
		l.after.Push(n)
	}
	l.afterMu.Unlock()
	if state == lockLost {
		n.FireLater()
	}
}

// Release runs pg_advisory_unlock on the lock connection and waits for the
// server's answer, whatever ctx says: the unlock runs under the store's
// context and within the lease bound (a round trip that takes longer
// closes the connection, which frees the lock too), so a release is never
// cut short by a caller going away, and once Release returns the key can be
// taken again.
//
// Release returns nil only when the server confirmed that the session held
// the lock up to the unlock. It returns an error matching
// lockstore.ErrLockLost when it cannot: the lock was lost before (Lost is
// closed), its connection failed or passed the lease bound before the
// unlock was confirmed, or the unlock answered false (the store then closes
// the connection, which is in doubt). Another holder may then have held the
// key meanwhile. Release is idempotent: after a nil, later calls return
// nil; a lost lock's Release returns the error each time.
func (l *pgLock) Release(context.Context) error {
	r, err := l.startRelease(nil)
	if r == nil {
		return err
	}
	<-r.done
	return r.err
}

// ReleaseLater is Release without the wait (see lockext.ReleaseLater):
// the unlock waits up to lazyUnlockDelay (1ms) for a lock request of the
// same connection to share its round trip, then goes on its own. done is
// called with Release's result in the lock connection's goroutine, or at
// once when the release fails before it is queued. A ReleaseLater on a lock
// whose key claimants of this node wait for is not delayed: its unlock is
// sent at once, as Release's would be.
func (l *pgLock) ReleaseLater(done func(error)) {
	if done == nil {
		done = func(error) {}
	}
	if r, err := l.startRelease(done); r == nil {
		done(err)
	}
}

// startRelease starts the release of l, or returns no request and the
// result when there is nothing to wait for: l was released before (nil) or
// lost (an error matching lockstore.ErrLockLost), or its connection is gone.
// A non-nil later makes the unlock lazy while nobody on this node waits for
// the key.
func (l *pgLock) startRelease(later func(error)) (*request, error) {
	if !l.state.CompareAndSwap(lockHeld, lockReleasing) {
		if l.state.Load() == lockLost {
			return nil, fmt.Errorf("postgres: release %s: %w", l.key, l.lostErr)
		}
		return nil, nil
	}
	r := &request{kind: unlockRequest, id: l.id, lock: l, done: make(chan struct{})}
	r.later = later
	// A waiter's turn comes with the unlock's answer: its unlock goes at
	// once.
	q := l.c.s.queue
	r.lazy = later != nil && (q.waiters() == 0 || q.waiting(l.id) == 0)
	if err := l.c.submit(r); err != nil {
		// Every error of submit means the connection the lock lived on is
		// gone (ErrClosed, errStaleLock, errRetired) or down
		// (ErrUnavailable): the server frees the lock with that session,
		// and the owner goroutine ends it. Nothing confirmed that it was
		// held up to now.
		return nil, fmt.Errorf("postgres: release %s: %w: %w", l.key, lockstore.ErrLockLost, err)
	}
	return r, nil
}

// end ends a lock whose connection has closed (the server freed it with the
// session): a held lock is lost, with cause, one being released is
// released. The turn passes on. It returns the AfterLost registrations to
// fire once the connection's mutex, which is held, is released.
func (l *pgLock) end(cause error) afterlost.Chain {
	l.lostErr = cause
	lost := l.state.CompareAndSwap(lockHeld, lockLost)
	if !lost {
		l.state.Store(lockReleased)
	}
	// The turn passes before Lost closes: a holder that takes the key again
	// as soon as it sees the loss must not find its own old turn.
	l.c.s.queue.pass(l.id)
	if lost {
		close(l.lost)
	}
	l.afterMu.Lock()
	after := l.after.Take()
	l.afterMu.Unlock()
	if !lost {
		return afterlost.Chain{}
	}
	return after
}

// connFor is the lock connection a new grant of id goes to: one of the
// active set (see rebalance), spread by lock id, unless another is more
// available (see lockConn.avail): a claim does not queue behind a round
// trip while a connection is free, nor fail while another active one is
// up. A key whose lock a connection lost when it went down stays with it
// until it is back: its old session may still hold the lock, and a claim
// elsewhere would be refused as if a live owner held it. An unlock goes to
// the lock's own connection.
func (s *Store) connFor(id LockID) *lockConn {
	active := *s.active.Load()
	n := len(active)
	first := spread(id, n)
	best, avail := active[first], active[first].avail.Load()
	for i := range n {
		o := active[(first+i)%n]
		a := o.avail.Load()
		if a == connDown && o.orphaned(id) {
			return o
		}
		if a > avail {
			best, avail = o, a
		}
	}
	return best
}

// spread is the index, of n lock connections, that id spreads to.
func spread(id LockID, n int) int { return int(mixLockID(id) >> 32 % uint64(n)) }

// orphaned reports whether id is among c's orphans.
func (c *lockConn) orphaned(id LockID) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, ok := c.orphans[id]
	return ok
}

// TryLock takes key now, or fails with lockstore.ErrLocked when another
// claimant holds it, on this node or any other. It fails fast with an error
// matching lockstore.ErrUnavailable while no active lock connection is up,
// or while the one that lost key's lock when it went down is being
// replaced (see connFor).
func (s *Store) TryLock(ctx context.Context, key lockstore.Key) (lockstore.Lock, error) {
	l, _, err := s.tryLock(ctx, key, nil)
	return l, err
}

// TryLockProbe is TryLock that also runs probe in the round trip that
// takes the key, and reports what it found (see lockext.Prober): probe.SQL
// is pipelined after the batch statement, on the lock connection, once for
// every request of that round trip with the same SQL, under a
// statement_timeout of half the time left to the round trip. When the probe fails (on the server, by
// that timeout, or with a row that does not scan), the key is unlocked and
// TryLockProbe returns an error (not matching lockstore.ErrLocked or
// lockstore.ErrUnavailable) naming the probe's error; the other locks on
// the connection are not affected.
func (s *Store) TryLockProbe(ctx context.Context, key lockstore.Key, probe lockext.Probe) (lockstore.Lock, lockext.Found, error) {
	if probe.SQL == "" {
		return nil, lockext.Found{}, fmt.Errorf("postgres: probe of %s: %w", key, errEmptyProbe)
	}
	return s.tryLock(ctx, key, &probe)
}

var errEmptyProbe = errors.New("the probe's SQL is empty")

// tryLock is TryLock with probe, when not nil, run in the round trip that
// takes the key.
func (s *Store) tryLock(ctx context.Context, key lockstore.Key, probe *lockext.Probe) (lockstore.Lock, lockext.Found, error) {
	id, err := s.begin(ctx, key)
	if err != nil {
		return nil, lockext.Found{}, err
	}
	if !s.queue.tryTake(id) {
		return nil, lockext.Found{}, fmt.Errorf("%w: %s (held or being taken on this node)", lockstore.ErrLocked, key)
	}
	l, found, err := s.attemptProbe(ctx, key, id, probe)
	if err != nil {
		return nil, lockext.Found{}, err
	}
	if l == nil {
		s.queue.pass(id)
		return nil, lockext.Found{}, fmt.Errorf("%w: %s", lockstore.ErrLocked, key)
	}
	return l, found, nil
}

// Lock waits until key is free or ctx ends. Claimants on this node are
// served first come first served: only the first one talks to the server,
// and while another node holds the key it polls pg_try_advisory_lock,
// after about 1ms and then twice as long each time up to
// Config.PollInterval (each wait with jitter, so that nodes do not poll in
// step), so
// that a wait never blocks a lock connection shared with other keys. It
// fails fast with an error matching lockstore.ErrUnavailable while no
// active lock connection is up, or while the one that lost key's lock is
// being replaced (see connFor), and with lockstore.ErrClosed when the
// store closes.
func (s *Store) Lock(ctx context.Context, key lockstore.Key) (lockstore.Lock, error) {
	id, err := s.begin(ctx, key)
	if err != nil {
		return nil, err
	}
	if err := s.queue.take(ctx, s.ctx.Done(), id); err != nil {
		return nil, err
	}
	var timer *time.Timer
	var poll *backoff.ExponentialBackOff
	for {
		l, err := s.attempt(ctx, key, id)
		if err != nil {
			return nil, err
		}
		if l != nil {
			return l, nil
		}
		if timer == nil {
			poll = newBackoff(firstPollInterval, s.cfg.PollInterval)
			timer = time.NewTimer(nextWait(poll, s.cfg.PollInterval))
			defer timer.Stop()
		} else {
			timer.Reset(nextWait(poll, s.cfg.PollInterval))
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
// It fails with lockstore.ErrCapacity when the store holds Config.MaxHeld
// locks.
func (s *Store) attempt(ctx context.Context, key lockstore.Key, id LockID) (*pgLock, error) {
	l, _, err := s.attemptProbe(ctx, key, id, nil)
	return l, err
}

// attemptProbe is attempt with probe, when not nil, run in the round trip
// that grants the lock; it reports what the probe found.
func (s *Store) attemptProbe(ctx context.Context, key lockstore.Key, id LockID, probe *lockext.Probe) (*pgLock, lockext.Found, error) {
	if n := s.held.Add(1); n > int64(s.maxHeld) {
		s.held.Add(-1)
		s.stats.capacity.Add(1)
		s.queue.pass(id)
		return nil, lockext.Found{}, fmt.Errorf("postgres: lock %s: the store holds %d locks (Config.MaxHeld): %w", key, s.maxHeld, lockstore.ErrCapacity)
	}
	r := &request{kind: lockRequest, id: id, key: key, probe: probe, done: make(chan struct{})}
	for {
		err := s.connFor(id).submit(r)
		if err == nil {
			break
		}
		if errors.Is(err, errRetired) {
			if s.closed.Load() {
				// The active set no longer changes once Close begins.
				err = lockstore.ErrClosed
			} else {
				// An extra connection went away since the active set was
				// read: the next read no longer has it.
				runtime.Gosched()
				continue
			}
		}
		s.held.Add(-1)
		s.queue.pass(id)
		return nil, lockext.Found{}, err
	}
	return s.await(ctx, r)
}

// await waits for the result of r, a lock request of attemptProbe, and
// reports what its probe found.
func (s *Store) await(ctx context.Context, r *request) (*pgLock, lockext.Found, error) {
	select {
	case <-r.done:
	case <-ctx.Done():
		if r.state.CompareAndSwap(requestPending, requestAbandoned) {
			return nil, lockext.Found{}, ctx.Err()
		}
		<-r.done // the result is being delivered: it came first
	}
	if r.err != nil {
		if !r.turnPassed {
			s.queue.pass(r.id)
		}
		return nil, lockext.Found{}, r.err
	}
	return r.result, r.found, nil
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
