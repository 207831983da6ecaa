package postgres

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

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
// When the connection fails, or a round trip or a ping times out, or an
// unlock returns false, the owner closes it (so the server frees whatever
// it held: a connection in doubt is never reused), ends every lock it held
// (closing their Lost channels), fails the requests in flight with
// lockstore.ErrUnavailable, and reconnects with backoff. Meanwhile submit
// fails fast with lockstore.ErrUnavailable.
type lockConn struct {
	s     *Store
	index int

	// conn is used by the owner goroutine only.
	conn *pgx.Conn

	wake chan struct{} // capacity 1: requests are pending

	// roundTrips and requests count the batches sent and the requests they
	// carried (for benchmarks: requests per round trip).
	roundTrips, requests atomic.Int64

	mu      sync.Mutex
	up      bool   // conn is connected and requests are accepted
	closed  bool   // the store is closed
	gen     uint64 // counts connections; a lock belongs to one
	pid     uint32 // server process of conn, 0 while down
	lastErr error  // why the connection went down
	// watchCancel interrupts the owner's read of the idle connection.
	watchCancel context.CancelFunc
	pending     []*request
	held        map[LockID]*pgLock
}

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

	// Results, set before done is closed.
	result *pgLock // lock requests: the grant, nil when the key is taken
	err    error
}

func newLockConn(s *Store, index int) *lockConn {
	return &lockConn{
		s:     s,
		index: index,
		wake:  make(chan struct{}, 1),
		held:  make(map[LockID]*pgLock),
	}
}

// submit queues r, or fails at once when the connection is down (an error
// matching lockstore.ErrUnavailable) or the store is closed. An unlock of a
// lock from an earlier connection fails with errStaleLock: that lock ended
// with its connection.
func (c *lockConn) submit(r *request) error {
	c.mu.Lock()
	switch {
	case c.closed:
		c.mu.Unlock()
		return lockstore.ErrClosed
	case r.kind == unlockRequest && r.lock.gen != c.gen:
		c.mu.Unlock()
		return errStaleLock
	case !c.up:
		err := c.unavailableLocked()
		c.mu.Unlock()
		return err
	}
	c.pending = append(c.pending, r)
	if len(c.pending) == 1 {
		select {
		case c.wake <- struct{}{}:
		default:
		}
		if c.watchCancel != nil {
			c.watchCancel()
			c.watchCancel = nil
		}
	}
	c.mu.Unlock()
	return nil
}

var errStaleLock = errors.New("postgres: lock ended with its connection")

func (c *lockConn) unavailableLocked() error {
	if c.lastErr != nil {
		return fmt.Errorf("postgres: lock connection %d is down (%w): %w", c.index, c.lastErr, lockstore.ErrUnavailable)
	}
	return fmt.Errorf("postgres: lock connection %d is down: %w", c.index, lockstore.ErrUnavailable)
}

// connect opens the connection. The store's context and Timeout bound it.
func (c *lockConn) connect() error {
	ctx, cancel := context.WithTimeout(c.s.ctx, c.s.cfg.Timeout)
	defer cancel()
	conn, err := pgx.ConnectConfig(ctx, c.s.connConfig)
	if err != nil {
		return err
	}
	// An idle_session_timeout (PostgreSQL 14+) would end the session, and
	// every lock on it, while the connection waits for work.
	if _, err := conn.Exec(ctx, `SELECT set_config(name, '0', false) FROM pg_settings WHERE name = 'idle_session_timeout'`); err != nil {
		closeConn(conn)
		return err
	}
	// Tokens drawn on this session must be above every token drawn before
	// a crash that came before it (see epoch.go).
	if _, err := c.s.bumpEpoch(ctx, conn); err != nil {
		closeConn(conn)
		return err
	}
	c.conn = conn
	c.mu.Lock()
	c.gen++
	c.up = true
	c.pid = conn.PgConn().PID()
	c.lastErr = nil
	c.mu.Unlock()
	return nil
}

// run is the owner goroutine: it serves requests, watches the idle
// connection, and replaces a dead connection, until the store's context
// ends.
func (c *lockConn) run() {
	defer c.s.wg.Done()
	// The owner waits idleWatchDelay on the wake channel alone before it
	// reads the idle connection: entering and leaving that read costs a
	// few goroutine switches, which a busy connection should not pay
	// between two round trips.
	grace := time.NewTimer(idleWatchDelay)
	defer grace.Stop()
	for {
		if c.conn == nil && !c.reconnect() {
			c.shutdown()
			return
		}
		select {
		case <-c.s.ctx.Done():
			c.shutdown()
			return
		case <-c.wake:
			c.flush()
			continue
		default:
		}
		grace.Reset(idleWatchDelay)
		select {
		case <-c.s.ctx.Done():
			c.shutdown()
			return
		case <-c.wake:
			grace.Stop()
			c.flush()
		case <-grace.C:
			c.idle()
		}
	}
}

// idleWatchDelay is how long a lock connection waits for work before it
// watches its socket (see run and idle).
const idleWatchDelay = 2 * time.Millisecond

// idle waits for work while reading the idle connection, so that a
// session the server ends (pg_terminate_backend, a shutdown: the server
// says so before it closes the socket) or a socket the kernel closes is
// noticed at once. A submit interrupts the read (it cancels the watch: the
// read times out and the connection stays usable). After KeepAlive without
// work the connection is pinged, which notices a peer that went silent
// (together with the TCP keepalive probes) within KeepAlive + Timeout.
func (c *lockConn) idle() {
	ctx, cancel := context.WithTimeout(c.s.ctx, c.s.cfg.KeepAlive)
	defer cancel()
	c.mu.Lock()
	if len(c.pending) > 0 {
		c.mu.Unlock()
		return
	}
	c.watchCancel = cancel
	c.mu.Unlock()
	err := c.conn.PgConn().WaitForNotification(ctx)
	c.mu.Lock()
	c.watchCancel = nil
	c.mu.Unlock()
	switch {
	case c.s.ctx.Err() != nil:
		// Closing: run shuts down.
	case err == nil:
		// A notification (nobody LISTENs here): nothing to do.
	case ctx.Err() == nil:
		c.fail(fmt.Errorf("connection lost while idle: %w", err), nil)
	case errors.Is(ctx.Err(), context.DeadlineExceeded):
		pctx, pcancel := context.WithTimeout(c.s.ctx, c.s.cfg.Timeout)
		err := c.conn.Ping(pctx)
		pcancel()
		if err != nil {
			c.fail(fmt.Errorf("ping: %w", err), nil)
		}
	default:
		// Woken by submit: run flushes.
	}
}

// reconnect replaces the connection, waiting between attempts with a
// doubling backoff up to Config.ReconnectBackoff. It returns false when
// the store's context ends first.
func (c *lockConn) reconnect() bool {
	backoff := min(firstReconnectBackoff, c.s.cfg.ReconnectBackoff)
	timer := time.NewTimer(backoff)
	defer timer.Stop()
	for {
		select {
		case <-c.s.ctx.Done():
			return false
		case <-timer.C:
		}
		err := c.connect()
		if err == nil {
			return true
		}
		c.mu.Lock()
		c.lastErr = err
		c.mu.Unlock()
		backoff = min(2*backoff, c.s.cfg.ReconnectBackoff)
		timer.Reset(backoff)
	}
}

// flush sends the pending requests, at most MaxBatch per round trip, until
// none is left or the connection fails.
func (c *lockConn) flush() {
	for {
		// Let the callers just handed their results run first: most submit
		// their next request at once (a Release after a TryLock), and it
		// is cheaper to carry it in this round trip than in one more.
		runtime.Gosched()
		c.mu.Lock()
		n := min(len(c.pending), c.s.cfg.MaxBatch)
		if n == 0 {
			c.mu.Unlock()
			return
		}
		batch := make([]*request, n)
		copy(batch, c.pending)
		rest := copy(c.pending, c.pending[n:])
		clear(c.pending[rest:])
		c.pending = c.pending[:rest]
		c.mu.Unlock()
		if err := c.roundTrip(batch); err != nil {
			c.fail(err, batch)
			return
		}
	}
}

// roundTrip runs one batch in one statement, so one round trip without
// pipelining, and applies the results once every result has been read.
func (c *lockConn) roundTrip(batch []*request) error {
	ctx, cancel := context.WithTimeout(c.s.ctx, c.s.cfg.Timeout)
	defer cancel()
	n := len(batch)
	isLock := make([]bool, n)
	ns := make([]int32, n)
	ids := make([]int32, n)
	for i, r := range batch {
		isLock[i] = r.kind == lockRequest
		ns[i], ids[i] = r.id.Namespace, r.id.ID
	}
	results := make([]int64, n)
	seen := make([]bool, n)
	c.roundTrips.Add(1)
	c.requests.Add(int64(n))
	rows, err := c.conn.Query(ctx, c.s.batchSQL, isLock, ns, ids)
	if err != nil {
		return err
	}
	for rows.Next() {
		var i, v int64
		if err := rows.Scan(&i, &v); err != nil {
			rows.Close()
			return err
		}
		if i < 1 || i > int64(n) || seen[i-1] {
			rows.Close()
			return fmt.Errorf("unexpected result for request %d of %d", i, n)
		}
		seen[i-1] = true
		results[i-1] = v
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	for i, ok := range seen {
		if !ok {
			return fmt.Errorf("no result for request %d of %d", i+1, n)
		}
	}

	var notHeld error
	for i, r := range batch {
		if r.kind == unlockRequest && results[i] == 0 {
			r.err = fmt.Errorf("postgres: release %s: the server did not hold it (the connection was closed): %w", r.lock.key, lockstore.ErrLockLost)
			notHeld = fmt.Errorf("pg_advisory_unlock(%d, %d) returned false", r.id.Namespace, r.id.ID)
		}
	}
	if notHeld != nil {
		// In doubt: close the connection rather than guess what it holds.
		return notHeld
	}
	now := time.Now()
	for i, r := range batch {
		if r.kind == unlockRequest {
			c.released(r)
		} else {
			c.granted(r, results[i], now)
		}
	}
	return nil
}

// batchSQLFor is the statement of one round trip: for each element of the
// arrays, in order, an unlock (op false: 1 when the session held the lock,
// 0 when not) or a try-lock (op true: a fencing token drawn from seq in the
// same statement when granted, 0 when not; the sequence starts at 1). WITH
// ORDINALITY numbers the results, so none is matched by position.
func batchSQLFor(seq string) string {
	return `SELECT t.i, CASE WHEN t.op ` +
		`THEN CASE WHEN pg_try_advisory_lock(t.a, t.b) THEN nextval(` + seq + `) ELSE 0 END ` +
		`ELSE CASE WHEN pg_advisory_unlock(t.a, t.b) THEN 1 ELSE 0 END END ` +
		`FROM unnest($1::bool[], $2::int4[], $3::int4[]) WITH ORDINALITY AS t(op, a, b, i)`
}

// released applies a confirmed unlock: the lock ends, its turn passes on.
func (c *lockConn) released(r *request) {
	l := r.lock
	c.mu.Lock()
	delete(c.held, l.id)
	c.mu.Unlock()
	l.state.Store(lockReleased)
	c.s.queue.pass(l.id)
	close(r.done)
}

// granted applies the result of a try-lock: token 0 means not granted.
func (c *lockConn) granted(r *request, token int64, now time.Time) {
	if token == 0 {
		if r.state.CompareAndSwap(requestPending, requestCompleted) {
			close(r.done)
		} else {
			c.s.queue.pass(r.id) // its caller gave up
		}
		return
	}
	l := &pgLock{c: c, key: r.key, id: r.id, token: token, at: now, lost: make(chan struct{})}
	c.mu.Lock()
	l.gen = c.gen
	c.held[r.id] = l
	c.mu.Unlock()
	if r.state.CompareAndSwap(requestPending, requestCompleted) {
		r.result = l
		close(r.done)
		return
	}
	// Its caller gave up while the grant was on its way: unlock it (its turn
	// passes on once the unlock is confirmed).
	l.state.Store(lockReleasing)
	c.mu.Lock()
	c.pending = append(c.pending, &request{kind: unlockRequest, id: l.id, lock: l, done: make(chan struct{})})
	c.mu.Unlock()
}

// fail closes the connection after err, ends every lock it held, and fails
// the requests in flight and pending. The owner reconnects afterwards.
func (c *lockConn) fail(err error, inflight []*request) {
	c.drop(fmt.Errorf("lock connection %d: %w", c.index, err), inflight, false)
}

// shutdown is fail for Close: requests fail with lockstore.ErrClosed.
func (c *lockConn) shutdown() {
	c.drop(lockstore.ErrClosed, nil, true)
}

func (c *lockConn) drop(cause error, inflight []*request, closing bool) {
	// A round trip cut short by Close fails like any other: report it as
	// the store closing, not as the connection being down.
	closing = closing || c.s.ctx.Err() != nil
	if c.conn != nil {
		if closing {
			ctx, cancel := context.WithTimeout(context.Background(), c.s.cfg.Timeout)
			_ = c.conn.Close(ctx)
			cancel()
		} else {
			closeConn(c.conn)
		}
		c.conn = nil
	}
	c.mu.Lock()
	c.up = false
	c.pid = 0
	if closing {
		c.closed = true
	} else {
		c.lastErr = cause
	}
	reqErr := c.unavailableLocked()
	if closing {
		reqErr = lockstore.ErrClosed
	}
	pending := c.pending
	c.pending = nil
	// The server freed every lock of the closed session. They end under
	// c.mu, so that a Release that finds the connection down (submit fails)
	// knows its lock has already ended and its turn passed on.
	for _, l := range c.held {
		l.end()
	}
	clear(c.held)
	c.mu.Unlock()

	for _, rs := range [][]*request{inflight, pending} {
		for _, r := range rs {
			switch {
			case r.kind == unlockRequest:
				// Its lock was among held: released with the session.
				close(r.done)
			case r.state.CompareAndSwap(requestPending, requestCompleted):
				r.err = reqErr
				close(r.done)
			default:
				c.s.queue.pass(r.id) // its caller gave up
			}
		}
	}
}

// closeConn closes a lock connection that failed or is in doubt: the
// socket first, so that the server sees the close and ends the session
// (freeing its locks) at once, however the network behaves; pgx's own
// Close would first try to say goodbye on a socket that may be silent.
func closeConn(conn *pgx.Conn) {
	_ = conn.PgConn().Conn().Close()
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	_ = conn.Close(ctx)
	cancel()
}
