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
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/claimbus/claimbus/internal/afterlost"
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

	// probe, for a lock request of TryLockProbe, is run in the round trip
	// that grants it (see roundTrip).
	probe *lockstore.Probe
	// later, for an unlock of ReleaseLater, is called with its result once
	// done is closed. lazy is set for such an unlock when nobody on this
	// node waits for the key: it waits up to lazyUnlockDelay for an eager
	// request (any other) to share its round trip (see flush).
	later  func(error)
	lazy   bool
	queued time.Time // when a lazy unlock was submitted

	// Results, set before done is closed.
	result *pgLock // lock requests: the grant, nil when the key is taken
	taken  bool    // lock requests with a probe: the probe found the value
	// turnPassed: the owner passes the turn of a lock request that failed
	// after its grant (a failed probe), once its unlock is confirmed.
	turnPassed bool
	err        error
}

// lazyUnlockDelay is how long an unlock of ReleaseLater waits for a lock
// request to carry it (see flush): long enough for the next claim of a
// sender that gets its answer and sends again at once, short against the
// 1ms and longer polls of another node waiting for the key.
const lazyUnlockDelay = time.Millisecond

// finish closes done, then tells a ReleaseLater caller. It is called once
// the result is set, outside c.mu.
func (r *request) finish() {
	close(r.done)
	if r.later != nil {
		r.later(r.err)
	}
}

func newLockConn(s *Store, index int, base bool) *lockConn {
	return &lockConn{
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

// connect opens the connection. The store's context and ConnectTimeout
// bound it.
func (c *lockConn) connect() error {
	ctx, cancel := context.WithTimeout(c.s.ctx, c.s.cfg.ConnectTimeout)
	defer cancel()
	conn, id, err := c.s.dialLock(ctx)
	if err != nil {
		return err
	}
	return c.setup(ctx, conn, id)
}

// dialLock opens a lock connection and asks it its session (see
// session.go), which also turns its idle_session_timeout off.
func (s *Store) dialLock(ctx context.Context) (*pgx.Conn, sessionID, error) {
	conn, err := pgx.ConnectConfig(ctx, s.connConfig)
	if err != nil {
		return nil, sessionID{}, err
	}
	id, err := querySession(ctx, conn, sessionProbeSQL)
	if err != nil {
		closeConn(conn)
		return nil, sessionID{}, err
	}
	return conn, id, nil
}

// setup bumps the token epoch on conn, a connection dialLock opened on
// session id, checks that the bump ran on the same session, and makes conn
// the lock connection. On error it closes conn. ctx bounds it.
func (c *lockConn) setup(ctx context.Context, conn *pgx.Conn, id sessionID) error {
	sent := time.Now()
	// Tokens drawn on this session must be above every token drawn before
	// a crash that came before it (see epoch.go).
	pid, err := c.s.bumpEpochPID(ctx, conn)
	if err != nil {
		closeConn(conn)
		return err
	}
	if pid != id.pid {
		closeConn(conn)
		return fmt.Errorf("the connection answered from backend pid %d, then from %d: %w", id.pid, pid, ErrNoSession)
	}
	c.conn = conn
	c.confirmed = sent
	c.mu.Lock()
	c.gen++
	c.up = true
	// The server's pid, not the one in the connection's BackendKeyData: a
	// pooler in session mode gives the client a key of its own.
	c.pid = id.pid
	c.lastErr = nil
	c.mu.Unlock()
	return nil
}

// run is the owner goroutine: it serves requests, watches the idle
// connection, and replaces a dead connection, until the store's context
// ends, or, for an extra connection, until it holds nothing or fails.
func (c *lockConn) run() {
	defer c.s.wg.Done()
	if !c.base {
		// Extra connections connect here, and join the active set once up.
		err := c.connect()
		c.s.grown(c, err)
		if err != nil {
			c.retire()
			return
		}
	}
	// The owner waits idleWatchDelay on the wake channel alone before it
	// reads the idle connection: entering and leaving that read costs a
	// few goroutine switches, which a busy connection should not pay
	// between two round trips.
	grace := time.NewTimer(idleWatchDelay)
	defer grace.Stop()
	for {
		if c.conn == nil {
			if !c.base {
				c.retire()
				return
			}
			if !c.reconnect() {
				c.shutdown()
				return
			}
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
			if !c.base && c.conn != nil && c.s.retireIdle(c) {
				return
			}
		}
	}
}

// idleWatchDelay is how long a lock connection waits for work before it
// watches its socket (see run and idle).
const idleWatchDelay = 2 * time.Millisecond

// deadline is when the round trip starting now must have succeeded: within
// Timeout, and before the lease bound of the last confirmation passes.
func (c *lockConn) deadline(now time.Time) time.Time {
	d := now.Add(c.s.cfg.Timeout)
	if lease := c.confirmed.Add(c.s.cfg.LeaseBound); lease.Before(d) {
		return lease
	}
	return d
}

// idle waits for work while reading the idle connection, so that a
// session the server ends (pg_terminate_backend, a shutdown: the server
// says so before it closes the socket) or a socket the kernel closes is
// noticed at once. A submit interrupts the read (it cancels the watch: the
// read times out and the connection stays usable). KeepAlive after the
// last confirmation the connection is pinged, under the lease deadline: a
// peer that went silent costs the connection, and its locks, within
// LeaseBound of the last round trip that succeeded.
func (c *lockConn) idle() {
	ctx, cancel := context.WithDeadline(c.s.ctx, c.confirmed.Add(c.s.cfg.KeepAlive))
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
		sent := time.Now()
		pctx, pcancel := context.WithDeadline(c.s.ctx, c.deadline(sent))
		err := c.conn.Ping(pctx)
		pcancel()
		if err != nil {
			c.fail(fmt.Errorf("ping: %w", err), nil)
			return
		}
		c.confirmed = sent
	default:
		// Woken by submit: run flushes.
	}
}

// reconnect replaces the connection, waiting between attempts with a
// doubling backoff, with jitter, up to Config.ReconnectBackoff. It returns
// false when the store's context ends first.
func (c *lockConn) reconnect() bool {
	b := newBackoff(firstReconnectBackoff, c.s.cfg.ReconnectBackoff)
	timer := time.NewTimer(nextWait(b, c.s.cfg.ReconnectBackoff))
	defer timer.Stop()
	for {
		select {
		case <-c.s.ctx.Done():
			return false
		case <-timer.C:
		}
		err := c.connect()
		if err == nil {
			c.s.stats.reconnects.Add(1)
			return true
		}
		c.mu.Lock()
		c.lastErr = err
		c.mu.Unlock()
		timer.Reset(nextWait(b, c.s.cfg.ReconnectBackoff))
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
		if c.eager == 0 && n < c.s.cfg.MaxBatch {
			// Only lazy unlocks: they wait for a request that needs its
			// answer, up to lazyUnlockDelay after the first of them, and
			// no later than the connection's next ping would be (the owner
			// does not watch the connection meanwhile).
			wait := min(c.s.lazyDelay-time.Since(c.pending[0].queued), time.Until(c.confirmed.Add(c.s.cfg.KeepAlive)))
			if wait > 0 {
				c.mu.Unlock()
				if !c.waitCompany(wait) {
					return
				}
				continue
			}
		}
		batch := make([]*request, n)
		copy(batch, c.pending)
		rest := copy(c.pending, c.pending[n:])
		clear(c.pending[rest:])
		c.pending = c.pending[:rest]
		for _, r := range batch {
			if !r.lazy {
				c.eager--
			}
		}
		c.mu.Unlock()
		if err := c.roundTrip(c.s.tripCtx, batch); err != nil {
			c.fail(err, batch)
			return
		}
	}
}

// waitCompany waits up to wait for an eager request (submit wakes the
// owner when the first one comes). It returns false when the store closes.
func (c *lockConn) waitCompany(wait time.Duration) bool {
	if c.company == nil {
		c.company = time.NewTimer(wait)
	} else {
		c.company.Reset(wait)
	}
	select {
	case <-c.wake:
		c.company.Stop()
		return true
	case <-c.company.C:
		return true
	case <-c.s.ctx.Done():
		c.company.Stop()
		return false
	}
}

// SQLSTATE out_of_memory is what PostgreSQL answers, as "out of shared
// memory", for a lock its lock table has no room for.
const sqlstateOutOfSharedMemory = "53200"

// roundTrip runs one batch in one statement (with the probes of its lock
// requests pipelined after it, see queryProbing), so one round trip, under
// base and the lease deadline, and applies the results once every result
// has been read. A batch the server could not run for lack of lock-table
// room is settled by settleCapacity instead.
func (c *lockConn) roundTrip(base context.Context, batch []*request) error {
	n := len(batch)
	isLock := make([]bool, n)
	ns := make([]int32, n)
	ids := make([]int32, n)
	for i, r := range batch {
		isLock[i] = r.kind == lockRequest
		ns[i], ids[i] = r.id.Namespace, r.id.ID
	}
	c.roundTrips.Add(1)
	c.requests.Add(int64(n))
	c.s.stats.roundTrips.Add(1)
	c.s.stats.requests.Add(int64(n))
	sent := time.Now()
	ctx, cancel := context.WithDeadline(base, c.deadline(sent))
	defer cancel()
	probes := probesOf(batch)
	var results []int64
	var err error
	if probes == nil {
		results, err = c.query(ctx, c.s.batchSQL, n, isLock, ns, ids)
	} else {
		results, err = c.queryProbing(ctx, n, probes, isLock, ns, ids)
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == sqlstateOutOfSharedMemory {
		return c.settleCapacity(ctx, batch, ns, ids, pgErr)
	}
	if err != nil {
		return err
	}
	c.confirmed = sent

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
		switch {
		case r.kind == unlockRequest:
			c.released(r)
		case r.probe != nil && results[i] != 0:
			p := probes[r.probe.SQL]
			r.taken = p.taken[r.probe.Value]
			if p.err != nil {
				r.err = p.err
			}
			c.granted(r, results[i], now)
		default:
			c.granted(r, results[i], now)
		}
	}
	return nil
}

// probeRun is one probe query of a round trip: the values it asks about
// and, once run, those it found taken, or its error.
type probeRun struct {
	values []string
	taken  map[string]bool
	err    error
}

// probesOf groups the probes of batch's lock requests by their SQL, or
// returns nil when none has one.
func probesOf(batch []*request) map[string]*probeRun {
	var probes map[string]*probeRun
	for _, r := range batch {
		if r.probe == nil {
			continue
		}
		if probes == nil {
			probes = make(map[string]*probeRun, 1)
		}
		p := probes[r.probe.SQL]
		if p == nil {
			p = &probeRun{}
			probes[r.probe.SQL] = p
		}
		p.values = append(p.values, r.probe.Value)
	}
	return probes
}

// queryProbing is query of the batch statement with the probes pipelined
// after it, in the same round trip: each probe is a statement of its own,
// so its snapshot is taken after the batch statement took its locks. A
// probe that fails on the server (a *pgconn.PgError: a missing table, a
// type mismatch) fails its requests, not the connection; the server then
// skips the rest of the pipeline, so the probes after it in the round trip
// fail too, with its error (their claims are
// unavailable, and their senders try again). Any other error fails the
// round trip.
func (c *lockConn) queryProbing(ctx context.Context, n int, probes map[string]*probeRun, args ...any) ([]int64, error) {
	var b pgx.Batch
	b.Queue(c.s.batchSQL, args...)
	order := make([]*probeRun, 0, len(probes))
	for sql, p := range probes {
		if err := c.prepareProbe(ctx, sql); err != nil {
			var pgErr *pgconn.PgError
			if !errors.As(err, &pgErr) {
				return nil, err
			}
			p.err = fmt.Errorf("postgres: probe: %w", err)
			continue
		}
		b.Queue(sql, p.values)
		order = append(order, p)
	}
	if len(order) == 0 {
		return c.query(ctx, c.s.batchSQL, n, args...)
	}
	br := c.conn.SendBatch(ctx, &b)
	rows, err := br.Query()
	var results []int64
	if err == nil {
		results, err = scanResults(rows, n)
	}
	if err != nil {
		_ = br.Close()
		return nil, err
	}
	for _, p := range order {
		p.taken, p.err = scanProbe(br)
		var pgErr *pgconn.PgError
		if p.err != nil && !errors.As(p.err, &pgErr) {
			_ = br.Close()
			return nil, p.err
		}
		if p.err != nil {
			p.err = fmt.Errorf("postgres: probe: %w", p.err)
		}
	}
	if err := br.Close(); err != nil {
		var pgErr *pgconn.PgError
		if !errors.As(err, &pgErr) {
			return nil, err
		}
	}
	return results, nil
}

// prepareProbe prepares sql on the connection, under its own text as its
// name, the first time a round trip carries it (pgx then uses the prepared
// statement): a probe the server refuses (a missing table) fails here, on
// its own, not in the pipeline with the batch statement, which pgx would
// not send. With the simple protocol nothing is prepared.
func (c *lockConn) prepareProbe(ctx context.Context, sql string) error {
	if c.conn.Config().DefaultQueryExecMode == pgx.QueryExecModeSimpleProtocol {
		return nil
	}
	_, err := c.conn.Prepare(ctx, sql, sql)
	return err
}

// scanProbe reads the rows of one probe: the values it found taken.
func scanProbe(br pgx.BatchResults) (map[string]bool, error) {
	rows, err := br.Query()
	if err != nil {
		return nil, err
	}
	taken := make(map[string]bool)
	for rows.Next() {
		var v string
		if err := rows.Scan(&v); err != nil {
			rows.Close()
			return nil, err
		}
		taken[v] = true
	}
	rows.Close()
	return taken, rows.Err()
}

// query runs sql, whose rows are (request number from 1, value), and
// returns the values of requests 1 to n, failing unless each came exactly
// once.
func (c *lockConn) query(ctx context.Context, sql string, n int, args ...any) ([]int64, error) {
	rows, err := c.conn.Query(ctx, sql, args...)
	if err != nil {
		return nil, err
	}
	return scanResults(rows, n)
}

// scanResults reads rows of (request number from 1, value) and returns the
// values of requests 1 to n, failing unless each came exactly once.
func scanResults(rows pgx.Rows, n int) ([]int64, error) {
	results := make([]int64, n)
	seen := make([]bool, n)
	for rows.Next() {
		var i, v int64
		if err := rows.Scan(&i, &v); err != nil {
			rows.Close()
			return nil, err
		}
		if i < 1 || i > int64(n) || seen[i-1] {
			rows.Close()
			return nil, fmt.Errorf("unexpected result for request %d of %d", i, n)
		}
		seen[i-1] = true
		results[i-1] = v
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, err
	}
	for i, ok := range seen {
		if !ok {
			return nil, fmt.Errorf("no result for request %d of %d", i+1, n)
		}
	}
	return results, nil
}

// settleCapacity settles a batch whose statement failed with "out of
// shared memory": a try-lock found no room in the server's lock table. The
// statement stopped part way, and session advisory locks ignore the
// rollback, so the tries before the failing one may hold their locks and
// the unlocks before it have run. One more statement looks up which of the
// batch's locks the session holds (pg_locks) and unlocks them: every
// unlock of the batch then has succeeded, and every try-lock fails with
// lockstore.ErrCapacity. The other locks on the connection stay held.
func (c *lockConn) settleCapacity(ctx context.Context, batch []*request, ns, ids []int32, cause *pgconn.PgError) error {
	sent := time.Now()
	if _, err := c.query(ctx, settleSQL, len(batch), ns, ids); err != nil {
		return fmt.Errorf("settle a batch after %q: %w", cause.Message, err)
	}
	c.confirmed = sent
	capErr := fmt.Errorf("postgres: the server's lock table is full (%s; raise max_locks_per_transaction, or lower Config.MaxHeld): %w",
		cause.Message, lockstore.ErrCapacity)
	for _, r := range batch {
		if r.kind == unlockRequest {
			c.released(r)
			continue
		}
		c.s.stats.capacity.Add(1)
		c.unload()
		if r.state.CompareAndSwap(requestPending, requestCompleted) {
			r.err = capErr
			close(r.done)
		} else {
			c.s.queue.pass(r.id) // its caller gave up
		}
	}
	return nil
}

// settleSQL unlocks those of the locks (namespaces $1, ids $2) the session
// holds, answering for each (number from 1, 1 when it was held).
const settleSQL = `WITH mine AS MATERIALIZED (
	SELECT classid::int8 AS a, objid::int8 AS b FROM pg_locks
	WHERE pid = pg_backend_pid() AND locktype = 'advisory' AND objsubid = 2 AND granted)
SELECT t.i, CASE WHEN EXISTS (SELECT 1 FROM mine WHERE mine.a = t.a::int8 AND mine.b = t.b::int8)
	THEN CASE WHEN pg_advisory_unlock(t.a, t.b) THEN 1 ELSE 0 END ELSE 0 END
FROM unnest($1::int4[], $2::int4[]) WITH ORDINALITY AS t(a, b, i)`

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
	c.unload()
	c.s.queue.pass(l.id)
	r.finish()
}

// granted applies the result of a try-lock: token 0 means not granted.
func (c *lockConn) granted(r *request, token int64, now time.Time) {
	if token == 0 {
		c.unload()
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
	if r.err == nil && r.state.CompareAndSwap(requestPending, requestCompleted) {
		r.result = l
		close(r.done)
		return
	}
	if r.err != nil && r.state.CompareAndSwap(requestPending, requestCompleted) {
		// Its probe failed: the caller gets the error, not the lock.
		r.turnPassed = true
		close(r.done)
	}
	// Its caller gave up while the grant was on its way, or its probe
	// failed: unlock it (its turn passes on once the unlock is confirmed).
	l.state.Store(lockReleasing)
	c.mu.Lock()
	c.queueLocked(&request{kind: unlockRequest, id: l.id, lock: l, done: make(chan struct{})})
	c.mu.Unlock()
}

// fail closes the connection after err, ends every lock it held, and fails
// the requests in flight and pending. The owner reconnects afterwards.
func (c *lockConn) fail(err error, inflight []*request) {
	c.drop(fmt.Errorf("lock connection %d: %w", c.index, err), inflight, false)
}

// shutdown is fail for Close: requests fail with lockstore.ErrClosed. The
// unlocks pending (a ReleaseLater waiting for company, a Release racing
// Close) are sent first, within Config.Timeout, so that a lock released
// before Close is reported released, not lost.
func (c *lockConn) shutdown() {
	if c.conn != nil {
		c.mu.Lock()
		var unlocks []*request
		rest := c.pending[:0]
		for _, r := range c.pending {
			if r.kind == unlockRequest {
				unlocks = append(unlocks, r) // eager goes with drop
			} else {
				rest = append(rest, r)
			}
		}
		clear(c.pending[len(rest):])
		c.pending = rest
		c.mu.Unlock()
		if len(unlocks) > 0 {
			ctx, cancel := context.WithTimeout(c.s.tripCtx, c.s.cfg.Timeout)
			err := c.roundTrip(ctx, unlocks)
			cancel()
			if err != nil {
				c.drop(lockstore.ErrClosed, unlocks, true)
				return
			}
		}
	}
	c.drop(lockstore.ErrClosed, nil, true)
}

// retire takes an extra connection that failed or is idle out of the
// store; its owner goroutine then returns.
func (c *lockConn) retire() {
	c.mu.Lock()
	c.retired = true
	c.mu.Unlock()
	c.s.removeConn(c)
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
		if !c.base {
			// Requests go to another connection from now on.
			c.retired = true
		}
	}
	reqErr := c.unavailableLocked()
	lostErr := fmt.Errorf("%w: %w", lockstore.ErrLockLost, cause)
	if closing {
		reqErr = lockstore.ErrClosed
		lostErr = fmt.Errorf("%w: %w", lockstore.ErrLockLost, lockstore.ErrClosed)
	}
	pending := c.pending
	c.pending, c.eager = nil, 0
	// The server freed every lock of the closed session. They end under
	// c.mu, so that a Release that finds the connection down (submit fails)
	// knows its lock has already ended and its turn passed on.
	held := make([]*pgLock, 0, len(c.held))
	for _, l := range c.held {
		held = append(held, l)
	}
	clear(c.held)
	if !closing {
		c.s.stats.lost.Add(int64(len(held)))
	}
	fire := make([]afterlost.Chain, 0, len(held))
	for _, l := range held {
		fire = append(fire, l.end(lostErr))
	}
	c.mu.Unlock()
	for _, f := range fire {
		f.Fire()
	}
	for range held {
		c.unload()
	}

	for _, rs := range [][]*request{inflight, pending} {
		for _, r := range rs {
			switch {
			case r.kind == unlockRequest:
				// Its lock was among held: it ended with the session, but
				// nothing confirmed it was held up to the unlock.
				r.err = fmt.Errorf("postgres: release %s: %w", r.lock.key, lostErr)
				r.finish()
			case r.state.CompareAndSwap(requestPending, requestCompleted):
				c.unload()
				r.err = reqErr
				close(r.done)
			default:
				c.unload()
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
