package postgres

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/claimbus/claimbus/internal/lockext"
	"github.com/claimbus/claimbus/lockstore"
)

// A lockConn is one dedicated connection the Locker holds session advisory
// locks on, and the goroutine that owns it (run). Callers never touch the
// connection: they queue requests (submit) and wait for their results. The
// owner sends every request pending at the time in one round trip (one
// statement over arrays: see batchSQLFor), so that many concurrent claims
// cost one round trip, and runs it under the store's context, never a
// caller's.
//
// The owner keeps the lease (see Config.LeaseBound): confirmed is when the
// last successful round trip was sent, every round trip must succeed by
// confirmed + LeaseBound, and an idle connection is pinged KeepAlive after
// confirmed. When the connection fails, or a round trip or a ping fails or
// times out, or an unlock returns false, the owner closes it (so the server
// frees whatever it held: a connection in doubt is never reused), ends
// every lock it held (closing their Lost channels), fails the requests in
// flight with lockstore.ErrUnavailable, and reconnects with backoff (a base
// connection) or goes away (an extra one, see Store.rebalance). Meanwhile
// submit fails fast with lockstore.ErrUnavailable.
type lockConn struct {
	s     *Store
	index int
	// base connections (the first Config.LockConns) live as long as the
	// store and reconnect; extra ones are opened when the base ones are
	// full and go away when they hold nothing or fail.
	base bool

	// downSince is when the connection last went down (under mu).
	downSince time.Time

	// conn and confirmed are used by the owner goroutine only.
	conn      *pgx.Conn
	confirmed time.Time

	wake chan struct{} // capacity 1: requests are pending
	// company waits for an eager request to join lazy unlocks (see flush);
	// used by the owner only, created on first use.
	company *time.Timer

	// roundTrips and requests count the batches sent and the requests they
	// carried (for benchmarks: requests per round trip).
	roundTrips, requests atomic.Int64
	// load counts the locks held on the connection and the lock requests
	// queued or in flight on it; full is set when load reaches
	// Config.LocksPerConn and cleared when it falls to three quarters.
	load atomic.Int64
	full atomic.Bool
	// avail says whether a new request would go out at once, wait for a
	// round trip in flight, or fail (see connFor). Only the goroutine that
	// runs the connection sets it (New's while it connects, then the
	// owner's).
	avail atomic.Int32

	mu      sync.Mutex
	up      bool   // conn is connected and requests are accepted
	closed  bool   // the store is closed
	retired bool   // an extra connection that went away: submit says errRetired
	gen     uint64 // counts connections; a lock belongs to one
	pid     uint32 // server process of conn, 0 while down
	lastErr error  // why the connection went down
	// watchCancel interrupts the owner's read of the idle connection.
	watchCancel context.CancelFunc
	pending     []*request
	// eager counts the requests of pending that are not lazy unlocks: while
	// it is 0, lazy unlocks wait for company (see flush).
	eager int
	held  map[LockID]*pgLock
	// orphans are the ids of the locks the connection held, or was taking,
	// when it went down, until it is back (see drop and connFor).
	orphans map[LockID]struct{}
}

// Availability of a lock connection for a new request (lockConn.avail),
// worst first.
const (
	connDown     int32 = iota // not connected: a request fails at once
	connInFlight              // a round trip in flight: a request waits for it
	connFree                  // a request goes out at once
)

type requestKind uint8

const (
	lockRequest requestKind = iota
	unlockRequest
)

// States of a lock request, for the race between its result and its
// caller giving up.
const (
	requestPending int32 = iota
	requestCompleted
	requestAbandoned
)

// A request is one try-lock or one unlock, queued on a lockConn.
type request struct {
	kind requestKind
	id   LockID
	key  lockstore.Key // lock requests
	lock *pgLock       // unlock requests

	state atomic.Int32  // lock requests: pending, completed, abandoned
	done  chan struct{} // closed when the result is set

	// probe, for a lock request of TryLockProbe, is run in the round trip
	// that grants it (see roundTrip).
	probe *lockext.Probe
	// later, for an unlock of ReleaseLater, is called with its result once
	// done is closed. lazy is set for such an unlock when nobody on this
	// node waits for the key: it waits up to lazyUnlockDelay for an eager
	// request (any other) to share its round trip (see flush).
	later  func(error)
	lazy   bool
	queued time.Time // when a lazy unlock was submitted

	// Results, set before done is closed.
	result *pgLock       // lock requests: the grant, nil when the key is taken
	found  lockext.Found // lock requests with a probe: what the probe found
	// turnPassed: the owner passes the turn of a lock request that failed
	// after its grant (a failed probe), once its unlock is confirmed.
	turnPassed bool
	err        error
}

// finish closes done, then tells a ReleaseLater caller. It is called once
// the result is set, outside c.mu.
func (r *request) finish() {
	close(r.done)
	if r.later != nil {
		r.later(r.err)
	}
}

func newLockConn(s *Store, index int, base bool) *lockConn {
	return &lockConn{ // avail: connDown until connected
		s:     s,
		index: index,
		base:  base,
		wake:  make(chan struct{}, 1),
		held:  make(map[LockID]*pgLock),
	}
}

// Errors of submit that callers handle themselves.
var (
	// errStaleLock: an unlock of a lock from an earlier connection; that
	// lock ended with its connection.
	errStaleLock = errors.New("postgres: lock ended with its connection")
	// errRetired: an extra connection went away; a lock request goes to
	// another connection.
	errRetired = errors.New("postgres: lock connection retired")
)

// submit queues r, or fails at once when the connection is down (an error
// matching lockstore.ErrUnavailable), retired (errRetired), or the store is
// closed. An unlock of a lock from an earlier connection fails with
// errStaleLock. A queued lock request counts in load.
func (c *lockConn) submit(r *request) error {
	c.mu.Lock()
	switch {
	case c.closed:
		c.mu.Unlock()
		return lockstore.ErrClosed
	case r.kind == unlockRequest && r.lock.gen != c.gen:
		c.mu.Unlock()
		return errStaleLock
	case c.retired:
		c.mu.Unlock()
		return errRetired
	case !c.up:
		err := c.unavailableLocked()
		c.mu.Unlock()
		return err
	}
	if r.kind == lockRequest && c.load.Add(1) >= int64(c.s.cfg.LocksPerConn) && !c.full.Swap(true) {
		defer c.s.rebalance()
	}
	if r.lazy {
		r.queued = time.Now()
	}
	c.queueLocked(r)
	c.mu.Unlock()
	return nil
}

// queueLocked adds r to the pending requests and wakes the owner when r is
// the first, or the first eager one, to come. c.mu is held.
func (c *lockConn) queueLocked(r *request) {
	c.pending = append(c.pending, r)
	wake := len(c.pending) == 1
	if !r.lazy {
		c.eager++
		wake = wake || c.eager == 1
	}
	if wake {
		select {
		case c.wake <- struct{}{}:
		default:
		}
		if c.watchCancel != nil {
			c.watchCancel()
			c.watchCancel = nil
		}
	}
}

// unload takes one lock or lock request off the connection's load, and off
// the store's count of held locks.
func (c *lockConn) unload() {
	c.s.held.Add(-1)
	if c.load.Add(-1) <= int64(c.s.cfg.LocksPerConn)*3/4 && c.full.Swap(false) {
		c.s.rebalance()
	}
}

func (c *lockConn) unavailableLocked() error {
	if c.lastErr != nil {
		return fmt.Errorf("postgres: lock connection %d is down (%w): %w", c.index, c.lastErr, lockstore.ErrUnavailable)
	}
	return fmt.Errorf("postgres: lock connection %d is down: %w", c.index, lockstore.ErrUnavailable)
}
