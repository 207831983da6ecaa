package postgres

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/claimbus/claimbus/lockstore"
)

// One round trip of a lock connection, in the order the owner goroutine
// runs it: flush takes the pending requests, roundTrip sends them as one
// statement (batchSQLFor) and applies the answers (released, granted), and
// settleCapacity settles a batch the server's lock table had no room for.
// The probes a round trip carries are in lockconn_probe.go.

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
		if wait := c.companyWaitLocked(n); wait > 0 {
			c.mu.Unlock()
			if !c.waitCompany(wait) {
				return
			}
			continue
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
		c.avail.Store(connInFlight) // under c.mu: a request queued now waits for this round trip
		c.mu.Unlock()
		if err := c.roundTrip(c.s.tripCtx, batch); err != nil {
			c.fail(err, batch) // down
			return
		}
	}
}

// deadline is when the round trip starting now must have succeeded: within
// Timeout, and before the lease bound of the last confirmation passes.
func (c *lockConn) deadline(now time.Time) time.Time {
	d := now.Add(c.s.cfg.Timeout)
	if lease := c.confirmed.Add(c.s.cfg.LeaseBound); lease.Before(d) {
		return lease
	}
	return d
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
	// Free before the callers get their answers: one that sends again at
	// once finds its connection free (see flush's yield).
	c.avail.Store(connFree)
	now := time.Now()
	for i, r := range batch {
		switch {
		case r.kind == unlockRequest:
			c.released(r)
		case r.probe != nil && results[i] != 0:
			p := probes[keyOf(r.probe)]
			r.found.By, r.found.Taken = p.taken[r.probe.Value]
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
		c.refuse(r, nil)
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

// refuse ends r, a lock request that gets no lock: with err, or with no
// result and no error when another session holds the key. When its caller
// gave up, its turn passes here.
func (c *lockConn) refuse(r *request, err error) {
	c.unload()
	if r.state.CompareAndSwap(requestPending, requestCompleted) {
		r.err = err
		close(r.done)
	} else {
		c.s.queue.pass(r.id) // its caller gave up
	}
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
	c.avail.Store(connFree) // before the answers, as in roundTrip
	capErr := fmt.Errorf("postgres: the server's lock table is full (%s; raise max_locks_per_transaction, or lower Config.MaxHeld): %w",
		cause.Message, lockstore.ErrCapacity)
	for _, r := range batch {
		if r.kind == unlockRequest {
			c.released(r)
			continue
		}
		c.s.stats.capacity.Add(1)
		c.refuse(r, capErr)
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
