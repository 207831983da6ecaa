package postgres

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/claimbus/claimbus/lockstore"
)

// Serialize runs fn in a transaction that holds key's
// pg_advisory_xact_lock, so that one fn at a time runs for key across every
// node sharing the database, and returns what fn returns.
//
// A node's own callers for one key first queue on a node-local mutex (first
// come first served), so only one of them at a time holds a pooled
// connection; the others wait in Go and never drain the pool. The one at
// the head takes a pooled connection and sends BEGIN and the lock in one
// round trip; with fn doing nothing, Serialize costs two round trips (that
// one and COMMIT), where Begin, SELECT pg_advisory_xact_lock and Commit
// cost three.
//
// ctx bounds the wait. Its deadline, when it has one, becomes the
// transaction's lock_timeout, set a little under the deadline so that the
// server answers before the client gives up and the connection stays
// usable; a wait the server ends this way returns an error matching both
// lockstore.ErrTimeout and context.DeadlineExceeded, one the server's own
// lock_timeout ends matches lockstore.ErrTimeout. The lock_timeout holds
// for the whole transaction, so fn's own lock waits end by the deadline too.
// A wait that ctx ends returns an error matching ctx's error.
//
// fn gets a ctx that carries the transaction. When fn returns an error or
// panics, the transaction rolls back: the error comes back as is, joined
// with the rollback's error if that failed too, and a panic goes on after
// the rollback. When ctx is done by the time fn returns, the transaction
// rolls back too. A failed commit comes back wrapped. On any error the
// result is T's zero value.
//
// # Nesting
//
// Inside an open transaction carried by ctx (one opened by Serialize on
// this Store, or the caller's own attached with WithTx), Serialize skips
// the node-local mutex, which could deadlock a caller waiting for a key
// while holding a transaction, and takes key's lock on that transaction
// (once: the same key again costs nothing), inside a savepoint, so that a
// wait that fails (lock_timeout, ErrTimeout) leaves that transaction usable.
// The lock is released when the outermost transaction ends. fn's error comes back as is; the outermost fn
// decides whether the transaction commits. Inside a call of Exclusive on
// this Store, the transaction runs on Exclusive's connection (on the
// connection of the enclosing call that holds key, when calls nest), and a
// key that an enclosing Exclusive holds is never waited for again.
//
// # Effects
//
// Serialize is a lockstore.AfterCommit scope: functions registered with
// lockstore.AfterCommit(ctx, f) anywhere inside the outermost Serialize,
// nested calls included, run once it has committed and released its
// connection and its node-local mutex, in the order they were registered;
// they never run when it rolls back. Keep fn to database work: anything
// slow in it holds the lock.
//
//	balance, err := postgres.Serialize(ctx, store, lockstore.Key{Namespace: "account", ID: id},
//		func(ctx context.Context, tx pgx.Tx) (int64, error) {
//			var balance int64
//			if err := tx.QueryRow(ctx, "SELECT balance FROM account WHERE id = $1", id).Scan(&balance); err != nil {
//				return 0, err
//			}
//			balance += amount
//			if _, err := tx.Exec(ctx, "UPDATE account SET balance = $2 WHERE id = $1", id, balance); err != nil {
//				return 0, err
//			}
//			lockstore.AfterCommit(ctx, func() { notify(id, balance) })
//			return balance, nil
//		})
//
// Bad input (a nil store or fn, an invalid key) gets an error at once, one
// matching lockstore.ErrInvalidKey for a key; a closed store gets one
// matching lockstore.ErrClosed.
func Serialize[T any](ctx context.Context, s *Store, key lockstore.Key, fn func(ctx context.Context, tx pgx.Tx) (T, error)) (T, error) {
	var zero T
	id, err := s.precheck("Serialize", key, fn == nil)
	if err != nil {
		return zero, err
	}
	if sc := txScopeFor(ctx, s); sc != nil {
		if err := sc.lock(ctx, s, key, id); err != nil {
			return zero, err
		}
		return fn(ctx, sc.tx)
	}

	st, fctx, err := s.beginSerial(ctx, key, id)
	if err != nil {
		return zero, err
	}
	// On a panic in fn, end rolls back and releases before the panic goes
	// on; after commit or rollback it does nothing.
	defer st.end()
	v, err := fn(fctx, st.tx)
	if err != nil {
		return zero, st.rollback(err)
	}
	if err := st.commit(ctx); err != nil {
		return zero, err
	}
	return v, nil
}

// precheck validates the arguments of Serialize and Exclusive and returns
// key's lock id.
func (s *Store) precheck(op string, key lockstore.Key, nilFn bool) (LockID, error) {
	switch {
	case s == nil:
		return LockID{}, fmt.Errorf("postgres: %s %q: nil *Store", op, key)
	case nilFn:
		return LockID{}, fmt.Errorf("postgres: %s %q: nil fn", op, key)
	}
	if err := s.checkOpen(); err != nil {
		return LockID{}, fmt.Errorf("postgres: %s %q: %w", op, key, err)
	}
	id, err := s.lockID(key)
	if err != nil {
		return LockID{}, fmt.Errorf("postgres: %s: %w", op, err)
	}
	return id, nil
}

// serialTxn is one outermost transaction of Serialize.
type serialTxn struct {
	s       *Store
	key     lockstore.Key
	id      LockID
	turn    bool            // id's turn in s.serial is held
	pooled  *pgxpool.Conn   // the pooled connection, or nil on Exclusive's
	xs      *exclusiveScope // Exclusive's connection in use, or nil
	conn    *pgx.Conn
	tx      pgx.Tx
	effects *lockstore.Effects
	ended   bool
}

// beginSerial takes the node-local mutex and a connection, and opens the
// transaction holding id's lock. It returns the ctx fn runs with.
func (s *Store) beginSerial(ctx context.Context, key lockstore.Key, id LockID) (*serialTxn, context.Context, error) {
	st := &serialTxn{s: s, key: key, id: id}
	// Inside Exclusive calls, the transaction runs on the connection of the
	// one that holds id, whose session makes the xact lock a formality and
	// whose call holds id's node-local mutex already; else on the innermost
	// one's.
	xs := exclusiveHolding(ctx, s, id)
	if xs == nil {
		xs = exclusiveScopeFor(ctx, s)
	}
	if xs == nil || xs.id != id {
		if err := s.serial.take(ctx, s.ctx.Done(), id); err != nil {
			return nil, nil, fmt.Errorf("postgres: Serialize %q: waiting for this node's turn: %w", key, err)
		}
		st.turn = true
	}
	if err := s.checkOpen(); err != nil {
		st.release()
		return nil, nil, fmt.Errorf("postgres: Serialize %q: %w", key, err)
	}
	if xs != nil {
		xs.mu.Lock()
		st.xs, st.conn = xs, xs.conn
	} else {
		c, err := s.pool.Acquire(ctx)
		if err != nil {
			st.release()
			return nil, nil, fmt.Errorf("postgres: Serialize %q: acquire a connection: %w", key, err)
		}
		st.pooled, st.conn = c, c.Conn()
	}

	timeout, bounded := lockTimeout(ctx)
	tx, err := beginLocked(ctx, st.conn, id, timeout, bounded)
	if err != nil {
		err = lockWaitError(ctx, err, bounded)
		if tx != nil && !st.conn.IsClosed() && st.conn.PgConn().TxStatus() != 'I' {
			// The transaction began but the lock failed: roll it back so
			// that the connection goes back to the pool usable.
			rctx, cancel := s.cleanupContext()
			if rbErr := tx.Rollback(rctx); rbErr != nil {
				err = errors.Join(err, fmt.Errorf("rollback: %w", rbErr))
			}
			cancel()
		}
		st.release()
		return nil, nil, fmt.Errorf("postgres: Serialize %q: take the lock: %w", key, err)
	}
	st.tx = tx
	fctx, effects := lockstore.NewEffects(ctx)
	st.effects = effects
	fctx = withTxScope(fctx, &txScope{store: s, tx: tx, held: map[LockID]struct{}{id: {}}})
	return st, fctx, nil
}

// commit commits, releases the connection and the node-local mutex, then
// runs the effects. When ctx is already done it rolls back instead.
func (st *serialTxn) commit(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return st.rollback(fmt.Errorf("postgres: Serialize %q: not committed: %w", st.key, err))
	}
	err := st.tx.Commit(ctx)
	st.ended = true
	st.release()
	if err != nil {
		return fmt.Errorf("postgres: Serialize %q: commit: %w", st.key, err)
	}
	st.effects.Run()
	return nil
}

// rollback rolls back after fnErr, releases, and returns fnErr joined with
// the rollback's error, if any.
func (st *serialTxn) rollback(fnErr error) error {
	err := st.rollbackAndRelease()
	if err != nil {
		return errors.Join(fnErr, fmt.Errorf("postgres: Serialize %q: rollback: %w", st.key, err))
	}
	return fnErr
}

// end rolls back and releases unless commit or rollback did already.
func (st *serialTxn) end() {
	if !st.ended {
		_ = st.rollbackAndRelease()
	}
}

func (st *serialTxn) rollbackAndRelease() error {
	st.ended = true
	ctx, cancel := st.s.cleanupContext()
	defer cancel()
	err := st.tx.Rollback(ctx)
	if errors.Is(err, pgx.ErrTxClosed) {
		err = nil
	}
	st.release()
	return err
}

// release gives back the connection (pgxpool destroys one that is closed or
// still in a transaction) and the node-local mutex.
func (st *serialTxn) release() {
	if st.pooled != nil {
		st.pooled.Release()
		st.pooled = nil
	}
	if st.xs != nil {
		st.xs.mu.Unlock()
		st.xs = nil
	}
	if st.turn {
		st.s.serial.pass(st.id)
		st.turn = false
	}
}

// cleanupContext bounds a rollback or an unlock, which must run even when
// the caller's ctx is done.
func (s *Store) cleanupContext() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), s.cfg.Timeout)
}

// lock takes id's lock on the scope's transaction unless it holds it, or
// an Exclusive call of s that ctx runs in holds it.
func (sc *txScope) lock(ctx context.Context, s *Store, key lockstore.Key, id LockID) error {
	if sc.tx == nil {
		return fmt.Errorf("postgres: Serialize %q: WithTx was given a nil transaction", key)
	}
	if sc.holds(id) {
		return nil
	}
	if exclusiveHolding(ctx, s, id) != nil {
		// An enclosing Exclusive's session holds id, maybe on another
		// connection than the transaction's: the call chain has the key
		// already, and waiting for it from this transaction would wait for
		// that call for ever.
		return nil
	}
	timeout, bounded := lockTimeout(ctx)
	if _, err := sc.tx.Exec(ctx, nestedLockSQL(id, timeout, bounded)); err != nil {
		err = lockWaitError(ctx, err, bounded)
		if conn := sc.tx.Conn(); conn != nil && !conn.IsClosed() {
			// The wait failed on the server: undo it, so that the outer
			// transaction stays usable (its fn decides what comes next).
			rctx, cancel := s.cleanupContext()
			if _, rbErr := conn.Exec(rctx, rollbackNestedLockSQL); rbErr != nil {
				err = errors.Join(err, fmt.Errorf("rollback to savepoint: %w", rbErr))
			}
			cancel()
		}
		return fmt.Errorf("postgres: Serialize %q: take the lock in the open transaction: %w", key, err)
	}
	sc.took(id)
	return nil
}

// SQLSTATE lock_not_available: a lock wait that lock_timeout ended.
const sqlstateLockNotAvailable = "55P03"

// lockWaitError maps the error of a lock wait: lock_timeout to
// lockstore.ErrTimeout (and context.DeadlineExceeded when the timeout came
// from ctx's deadline), and an error caused by ctx to one matching ctx's
// error.
func lockWaitError(ctx context.Context, err error, fromDeadline bool) error {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == sqlstateLockNotAvailable {
		if fromDeadline {
			return fmt.Errorf("%w: lock_timeout set from the ctx deadline: %w: %w", lockstore.ErrTimeout, context.DeadlineExceeded, err)
		}
		return fmt.Errorf("%w: the server's lock_timeout: %w", lockstore.ErrTimeout, err)
	}
	if ctxErr := ctx.Err(); ctxErr != nil && !errors.Is(err, ctxErr) {
		return fmt.Errorf("%w: %w", ctxErr, err)
	}
	return err
}

// Bounds of the margin between a ctx deadline and the lock_timeout derived
// from it: a tenth of the time left, within these.
const (
	minTimeoutMargin = 5 * time.Millisecond
	maxTimeoutMargin = 250 * time.Millisecond
)

// lockTimeout returns the lock_timeout, in milliseconds, that ends a lock
// wait a little before ctx's deadline, so that the server answers first.
// It reports false when ctx has no deadline, or one too far off for
// lock_timeout (about 24 days).
func lockTimeout(ctx context.Context) (int64, bool) {
	deadline, ok := ctx.Deadline()
	if !ok {
		return 0, false
	}
	left := time.Until(deadline)
	margin := min(max(left/10, minTimeoutMargin), maxTimeoutMargin)
	ms := (left - margin).Milliseconds()
	if ms > math.MaxInt32 {
		return 0, false
	}
	// lock_timeout = 0 would mean no limit: wait at least 1ms.
	return max(ms, 1), true
}

// SQL of beginLocked's batch.
const (
	setLockTimeoutSQL = "select set_config('lock_timeout', $1, true)"
	xactLockSQL       = "select pg_advisory_xact_lock($1, $2)"
)

// beginLocked begins a transaction on conn and takes id's xact lock in one
// round trip: a pgx batch that begins the transaction (Batch.BeginTx) and
// queues the lock, and before it lock_timeout when bounded, all sent
// together. Its statements are prepared and cached per connection (after
// the first use on a connection, the batch is one round trip), and bound
// rather than parsed, which costs the server less than a simple-protocol
// message of the same statements. When the transaction began but the lock
// failed, it returns the open transaction with the error, for the caller
// to roll back.
func beginLocked(ctx context.Context, conn *pgx.Conn, id LockID, timeoutMS int64, bounded bool) (pgx.Tx, error) {
	var b pgx.Batch
	b.BeginTx(pgx.TxOptions{})
	if bounded {
		b.Queue(setLockTimeoutSQL, strconv.FormatInt(timeoutMS, 10))
	}
	b.Queue(xactLockSQL, id.Namespace, id.ID)
	br := conn.SendBatch(ctx, &b)
	tx := br.Tx()
	if err := br.Close(); err != nil {
		return tx, err
	}
	return tx, nil
}

// nestedLockSavepoint guards a lock wait in an open transaction: a wait
// that fails (lock_timeout, a cancel) rolls back to it instead of leaving
// the transaction aborted.
const nestedLockSavepoint = "claimbus_lock"

// nestedLockSQL takes id's xact lock in an open transaction, inside the
// savepoint nestedLockSavepoint, released at once when the lock is granted:
// xact locks taken inside a released savepoint stay with the transaction.
// Bounded, it sets lock_timeout for this wait only (SET LOCAL, which a
// rollback to the savepoint undoes as well): it saves the transaction's
// lock_timeout in a placeholder setting and restores it, all in one
// message.
func nestedLockSQL(id LockID, timeoutMS int64, bounded bool) string {
	b := make([]byte, 0, 384)
	b = append(b, "savepoint "+nestedLockSavepoint+"; "...)
	if bounded {
		b = append(b, "select set_config('claimbus.saved_lock_timeout', current_setting('lock_timeout'), true); set local lock_timeout = "...)
		b = strconv.AppendInt(b, timeoutMS, 10)
		b = append(b, "; "...)
	}
	b = appendLockCall(b, "pg_advisory_xact_lock", id)
	if bounded {
		b = append(b, "; select set_config('lock_timeout', current_setting('claimbus.saved_lock_timeout'), true)"...)
	}
	b = append(b, "; release savepoint "+nestedLockSavepoint...)
	return string(b)
}

// rollbackNestedLockSQL undoes a failed nestedLockSQL: the transaction is
// as it was before it.
const rollbackNestedLockSQL = "rollback to savepoint " + nestedLockSavepoint + "; release savepoint " + nestedLockSavepoint

// appendLockCall appends "select fn(namespace, id)".
func appendLockCall(b []byte, fn string, id LockID) []byte {
	b = append(b, "select "...)
	b = append(b, fn...)
	b = append(b, '(')
	b = strconv.AppendInt(b, int64(id.Namespace), 10)
	b = append(b, ", "...)
	b = strconv.AppendInt(b, int64(id.ID), 10)
	return append(b, ')')
}
