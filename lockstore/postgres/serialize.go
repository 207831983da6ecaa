package postgres

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/claimbus/claimbus/lockstore/internal/effects"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/claimbus/claimbus/internal/observe"
	"github.com/claimbus/claimbus/lockstore"
	"github.com/claimbus/claimbus/lockstore/internal/txnest"
)

// runSerialize is Store.Serialize for a fn that returns a value.
func runSerialize[T any](ctx context.Context, s *Store, key lockstore.Key, fn func(ctx context.Context, tx pgx.Tx) (T, error)) (v T, err error) {
	ctx, end := observe.StartStep(ctx, observe.StepSerialize, key.Namespace)
	defer func() { end(err) }()
	return serialize(ctx, s, key, fn)
}

// serialize is Serialize.
func serialize[T any](ctx context.Context, s *Store, key lockstore.Key, fn func(ctx context.Context, tx pgx.Tx) (T, error)) (T, error) {
	var zero T
	id, err := s.precheck("Serialize", key, fn == nil)
	if err != nil {
		return zero, err
	}
	if sc := txScopeFor(ctx, s); sc != nil {
		return nestedSerialize(ctx, s, sc, key, id, fn)
	}

	st, fctx, err := s.beginSerial(ctx, key, id)
	if err != nil {
		return zero, err
	}
	return txnest.RunOutermost(ctx, fctx, st, st.tx, fn)
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
	call    *call
	key     lockstore.Key
	id      LockID
	turn    bool            // id's turn in s.serial is held
	pooled  *pgxpool.Conn   // the pooled connection, or nil on Exclusive's
	xs      *exclusiveScope // Exclusive's connection in use, or nil
	conn    *pgx.Conn
	tx      pgx.Tx
	effects *effects.Scope
	ended   bool
}

// beginSerial takes the node-local mutex and a connection, and opens the
// transaction holding id's lock. It returns the ctx fn runs with.
func (s *Store) beginSerial(ctx context.Context, key lockstore.Key, id LockID) (*serialTxn, context.Context, error) {
	c, err := s.calls.start(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("postgres: Serialize %q: %w", key, err)
	}
	st := &serialTxn{s: s, call: c, key: key, id: id}
	fail := func(what string, err error) (*serialTxn, context.Context, error) {
		st.release()
		c.end()
		return nil, nil, fmt.Errorf("postgres: Serialize %q: %s%w", key, what, c.stopCause(err))
	}
	// Inside Exclusive calls, the transaction runs on the connection of the
	// one that holds id, whose session makes the xact lock a formality, whose
	// token it keeps and whose call holds id's node-local mutex already;
	// else on the innermost one's.
	holder := exclusiveHolding(ctx, s, id)
	xs := holder
	if xs == nil {
		xs = exclusiveScopeFor(ctx, s)
	}
	if xs == nil || xs.id != id {
		if err := s.serial.take(c.ctx, s.ctx.Done(), id); err != nil {
			return fail("waiting for this node's turn: ", err)
		}
		st.turn = true
	}
	if err := s.checkOpen(); err != nil {
		return fail("", err)
	}
	if xs != nil {
		xs.mu.Lock()
		st.xs, st.conn = xs, xs.conn
	} else {
		pc, err := s.pool.Acquire(c.ctx)
		if err != nil {
			return fail("acquire a connection: ", err)
		}
		st.pooled, st.conn = pc, pc.Conn()
		if err := c.use(st.conn.PgConn().Conn()); err != nil {
			return fail("", err)
		}
	}

	var token int64
	if holder != nil {
		token = holder.token
		err = st.begin(c.ctx, nil)
	} else {
		err = st.begin(c.ctx, &token)
	}
	if err != nil {
		return fail("take the lock: ", err)
	}
	var fctx context.Context
	fctx, st.effects = effects.New(c.ctx)
	fctx = effects.WithToken(fctx, token)
	sc := &txScope{Store: s, Tx: st.tx}
	sc.Held.Init(id, token)
	fctx = txnest.WithScope(fctx, sc)
	return st, fctx, nil
}

// begin opens the transaction holding st.id's lock on st.conn and, when
// token is not nil, draws a fencing token into it. A token that comes back
// NULL (the epoch is not live: the server crashed since the last bump, see
// epoch.go) is never handed out: begin rolls back, bumps the epoch on the
// connection and tries once more.
func (st *serialTxn) begin(ctx context.Context, token *int64) error {
	timeout, bounded := lockTimeout(ctx)
	for attempt := 0; ; attempt++ {
		bctx, cancel := st.s.statementBound(ctx)
		tx, live, err := beginLocked(bctx, st.conn, st.s.serialSQL(), st.id, timeout, bounded, st.s.cfg.StatementTimeout, token)
		cancel()
		if err != nil {
			err = lockWaitError(ctx, err, bounded)
			if tx != nil && !st.conn.IsClosed() && st.conn.PgConn().TxStatus() != 'I' {
				// The transaction began but the lock failed: roll it back so
				// that the connection goes back to the pool usable.
				if rbErr := st.rollbackTx(tx); rbErr != nil {
					err = errors.Join(err, fmt.Errorf("rollback: %w", rbErr))
				}
			}
			return err
		}
		if live {
			st.tx = tx
			return nil
		}
		if err := st.rollbackTx(tx); err != nil {
			return fmt.Errorf("roll back to bump the token epoch: %w", err)
		}
		if attempt > 0 {
			return fmt.Errorf("%w: the token epoch is still not live after a bump", lockstore.ErrUnavailable)
		}
		if st.xs != nil {
			// The connection is an enclosing Exclusive's, holding its
			// session lock: a failed bump must not cost it that session.
			if err := st.s.bumpEpochAside(ctx); err != nil {
				return err
			}
			continue
		}
		bctx, cancel = context.WithTimeout(ctx, st.s.cfg.Timeout)
		err = st.s.bumpEpoch(bctx, st.conn)
		cancel()
		if err != nil {
			// The session may still hold the bump's lock: it must end.
			closeConn(st.conn)
			return err
		}
	}
}

// rollbackTx rolls back tx, bounded by cleanupContext.
func (st *serialTxn) rollbackTx(tx pgx.Tx) error {
	ctx, cancel := st.s.cleanupContext()
	defer cancel()
	return tx.Rollback(ctx)
}

// statementBound bounds, on the client's side, a statement of Serialize's
// own (BEGIN and the lock, COMMIT) when ctx has no deadline: the server's
// statement_timeout (Config.StatementTimeout) cannot answer through a
// connection that went silent, so the client gives up a second after it
// would have fired, and pgx closes the connection.
func (s *Store) statementBound(ctx context.Context) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, s.cfg.StatementTimeout+statementBoundMargin)
}

// statementBoundMargin is how much longer than StatementTimeout the client
// waits for the server's answer (see statementBound).
const statementBoundMargin = time.Second

// Commit commits, releases the connection and the node-local mutex, then
// runs the effects. When ctx is already done, or the call was stopped
// (Close), it rolls back instead.
func (st *serialTxn) Commit(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return st.Rollback(fmt.Errorf("postgres: Serialize %q: not committed: %w", st.key, err))
	}
	if err := st.call.reason(); err != nil {
		return st.Rollback(fmt.Errorf("postgres: Serialize %q: not committed: %w", st.key, err))
	}
	cctx, cancel := st.s.statementBound(ctx)
	err := st.tx.Commit(cctx)
	cancel()
	// Asked before the release: the pool may hand the connection on.
	sessionEnded := err != nil && st.conn.IsClosed()
	st.ended = true
	st.release()
	if err != nil {
		if sessionEnded && st.call.reason() == nil {
			// The session is gone, and key's xact lock with it: the lock
			// cannot be confirmed to the commit.
			err = fmt.Errorf("%w: the session ended: %w", lockstore.ErrLockLost, err)
		}
		return fmt.Errorf("postgres: Serialize %q: commit: %w", st.key, st.call.stopCause(err))
	}
	st.effects.Run()
	return nil
}

// Rollback rolls back after fnErr, releases, and returns fnErr joined with
// the rollback's error, if any.
func (st *serialTxn) Rollback(fnErr error) error {
	err := st.rollbackAndRelease()
	if err != nil {
		return errors.Join(fnErr, fmt.Errorf("postgres: Serialize %q: rollback: %w", st.key, err))
	}
	return fnErr
}

// End rolls back and releases unless commit or rollback did already, and
// ends the call: fn's ctx is cancelled once Serialize returns (after the
// effects ran).
func (st *serialTxn) End() {
	if !st.ended {
		_ = st.rollbackAndRelease()
	}
	st.call.end()
}

func (st *serialTxn) rollbackAndRelease() error {
	st.ended = true
	err := st.rollbackTx(st.tx)
	if errors.Is(err, pgx.ErrTxClosed) {
		err = nil
	}
	st.release()
	return err
}

// release gives back the connection and the node-local mutex.
func (st *serialTxn) release() {
	st.pooled = releasePooled(st.call, st.pooled, st.conn)
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

// SQLSTATEs of a lock wait the server ended: lock_not_available
// (lock_timeout) and query_canceled (statement_timeout, or a cancel
// request).
const (
	sqlstateLockNotAvailable = "55P03"
	sqlstateQueryCanceled    = "57014"
)

// lockWaitError maps the error of a lock wait: lock_timeout to
// lockstore.ErrTimeout (and context.DeadlineExceeded when the timeout came
// from ctx's deadline), statement_timeout to lockstore.ErrTimeout, and an
// error caused by ctx to one matching ctx's error.
func lockWaitError(ctx context.Context, err error, fromDeadline bool) error {
	var pgErr *pgconn.PgError
	isPg := errors.As(err, &pgErr)
	switch {
	case isPg && pgErr.Code == sqlstateLockNotAvailable && fromDeadline:
		return fmt.Errorf("%w: lock_timeout set from the ctx deadline: %w: %w", lockstore.ErrTimeout, context.DeadlineExceeded, err)
	case isPg && pgErr.Code == sqlstateLockNotAvailable:
		return fmt.Errorf("%w: the server's lock_timeout: %w", lockstore.ErrTimeout, err)
	case isPg && pgErr.Code == sqlstateQueryCanceled && ctx.Err() == nil:
		return fmt.Errorf("%w: statement_timeout (Config.StatementTimeout, or one set on the server): %w", lockstore.ErrTimeout, err)
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

// serialSQL are the statements of Serialize and Exclusive that name the
// store's schema, built once (Store.serialSQL).
type serialSQL struct {
	// token draws a fencing token, NULL when the epoch is not live (see
	// epoch.go).
	token string
}

// serialSQL returns the store's serialSQL.
func (s *Store) serialSQL() *serialSQL {
	s.calls.sqlOnce.Do(func() {
		s.calls.sql = serialSQL{token: "select " + s.liveTokenSQL()}
	})
	return &s.calls.sql
}

// Statements of beginLocked's batch.
const (
	setLockTimeoutSQL = "select set_config('lock_timeout', $1, true)"
	// setStatementTimeoutSQL sets the transaction's statement_timeout to
	// $1 (milliseconds, as text) unless one is in force already (the
	// server's, the role's, the pool's), which stays.
	setStatementTimeoutSQL = "select set_config('statement_timeout', $1, true) where current_setting('statement_timeout') = '0'"
	xactLockSQL            = "select pg_advisory_xact_lock($1, $2)"
)

// beginLocked begins a transaction on conn, bounds it, takes id's xact
// lock and, when token is not nil, draws a fencing token into it, all in
// one round trip: a pgx batch that begins the transaction (Batch.BeginTx),
// sets lock_timeout (bounded: from ctx's deadline) or else
// statement_timeout (stmtTimeout), takes the lock and then draws the token,
// so that the token is drawn once the lock is granted. Its statements are
// prepared and cached per connection (after the first use on a connection,
// the batch is one round trip), and bound rather than parsed, which costs
// the server less than a simple-protocol message of the same statements.
// live is false when the token came back NULL (the transaction is open:
// the caller rolls back and bumps the epoch). When the transaction began
// but the lock failed, it returns the open transaction with the error, for
// the caller to roll back.
func beginLocked(ctx context.Context, conn *pgx.Conn, q *serialSQL, id LockID, timeoutMS int64, bounded bool, stmtTimeout time.Duration, token *int64) (tx pgx.Tx, live bool, err error) {
	var b pgx.Batch
	b.BeginTx(pgx.TxOptions{})
	if bounded {
		b.Queue(setLockTimeoutSQL, strconv.FormatInt(timeoutMS, 10))
	} else {
		b.Queue(setStatementTimeoutSQL, strconv.FormatInt(max(stmtTimeout.Milliseconds(), 1), 10))
	}
	b.Queue(xactLockSQL, id.Namespace, id.ID)
	var drawn *int64
	if token != nil {
		b.Queue(q.token).QueryRow(func(row pgx.Row) error { return row.Scan(&drawn) })
	}
	br := conn.SendBatch(ctx, &b)
	tx = br.Tx()
	if err := br.Close(); err != nil {
		return tx, false, err
	}
	if token == nil {
		return tx, true, nil
	}
	if drawn == nil {
		return tx, false, nil
	}
	*token = *drawn
	return tx, true, nil
}

// rollbackSavepointSQL rolls back to the savepoint of a nested call and
// ends it, in one message.
const rollbackSavepointSQL = txnest.RollbackToSQL + "; " + txnest.ReleaseSQL

// nestedLockSQL opens the savepoint txnest.Name in an open transaction,
// takes id's xact lock in it and draws a token (q.token), all in one
// message; the caller reads the token from its last result. Bounded, it
// sets lock_timeout for this wait only (SET LOCAL, which a rollback to the
// savepoint undoes as well): it saves the transaction's lock_timeout in a
// placeholder setting and restores it. A wait that fails leaves the
// savepoint open, for the caller to roll back to.
func nestedLockSQL(q *serialSQL, id LockID, timeoutMS int64, bounded bool) string {
	b := make([]byte, 0, 512)
	b = append(b, txnest.SavepointSQL+"; "...)
	if bounded {
		b = append(b, "select set_config('claimbus.saved_lock_timeout', current_setting('lock_timeout'), true); set local lock_timeout = "...)
		b = strconv.AppendInt(b, timeoutMS, 10)
		b = append(b, "; "...)
	}
	b = appendLockCall(b, "pg_advisory_xact_lock", id)
	if bounded {
		b = append(b, "; select set_config('lock_timeout', current_setting('claimbus.saved_lock_timeout'), true)"...)
	}
	b = append(b, "; "...)
	b = append(b, q.token...)
	return string(b)
}

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

// releasePooled gives pooled, whose connection is conn, back to the pool
// (pgxpool destroys one that is closed or still in a transaction), closing
// conn first when Close aborted call's socket, and returns nil. A nil
// pooled (a connection not from the pool) is left alone.
func releasePooled(c *call, pooled *pgxpool.Conn, conn *pgx.Conn) *pgxpool.Conn {
	if pooled == nil {
		return nil
	}
	if c.released() {
		closeConn(conn)
	}
	pooled.Release()
	return nil
}
