package postgres

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/claimbus/claimbus/lockstore/internal/effects"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/claimbus/claimbus/lockstore"
	"github.com/claimbus/claimbus/lockstore/internal/txnest"
)

// Txn is a transaction that holds the pg_advisory_xact_lock of each of its
// keys from its first round trip to its end, opened by Begin: the
// transaction of a command whose claims, writes and stored outcome commit
// together. Its locks cannot be lost while it lives: the session's end
// aborts the transaction with them. A Txn belongs to one goroutine.
type Txn struct {
	s       *Store
	call    *call
	ids     []LockID // sorted, without repeats
	turns   int      // how many of ids' node-local turns are held
	pooled  *pgxpool.Conn
	conn    *pgx.Conn
	tx      pgx.Tx
	effects *effects.Scope
	ended   bool
}

// ErrOutcomeUnknown matches the error of a Commit whose COMMIT was sent
// and whose answer never came (the connection broke): the transaction may
// have committed or not. Any other error of Begin or Commit means that
// nothing of the transaction applied.
var ErrOutcomeUnknown = errors.New("postgres: the commit was sent and not answered: its outcome is unknown")

// Begin opens a transaction holding the xact lock of each key. It takes
// this node's turn for each key (first come first served, in lock order,
// so that commands with several keys never wait on each other), then a
// pooled connection, and sends in one round trip: BEGIN, the
// transaction's timeouts, the locks in the same order, and the queries
// queued on first (nil: none), whose callbacks get their answers. wait
// bounds the wait for the turns and the locks; a wait past it returns an
// error matching lockstore.ErrTimeout.
//
// The transaction's statement_timeout is Config.StatementTimeout unless
// one is in force already, and its idle_in_transaction_session_timeout is
// Config.StatementTimeout too: a node that goes silent holds its keys on
// the server at most that long (plus the server's TCP keepalive, when the
// connection itself went silent).
//
// The returned ctx, a child of ctx, carries the transaction: TxFrom finds
// it, Serialize and Exclusive on any Store nest in it (see Store.WithTx), and
// lockstore.AfterCommit registers effects that run after Commit succeeds.
// End the Txn with Commit or Rollback; Store.Close rolls back one that has
// not committed yet.
func Begin(ctx context.Context, s *Store, keys []lockstore.Key, wait time.Duration, first *pgx.Batch) (*Txn, context.Context, error) {
	switch {
	case s == nil:
		return nil, nil, errors.New("postgres: Begin: nil *Store")
	case wait <= 0:
		return nil, nil, fmt.Errorf("postgres: Begin: wait is %v, want > 0", wait)
	}
	if err := s.checkOpen(); err != nil {
		return nil, nil, fmt.Errorf("postgres: Begin: %w", err)
	}
	if txScopeFor(ctx, s) != nil || exclusiveScopeFor(ctx, s) != nil {
		return nil, nil, errors.New("postgres: Begin inside a transaction or an Exclusive call of the store: nest with Serialize instead")
	}
	ids := make([]LockID, 0, len(keys))
	for _, k := range keys {
		id, err := s.lockID(k)
		if err != nil {
			return nil, nil, fmt.Errorf("postgres: Begin: %w", err)
		}
		ids = append(ids, id)
	}
	slices.SortFunc(ids, func(a, b LockID) int { return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.ID, b.ID)) })
	ids = slices.Compact(ids)

	c, err := s.calls.start(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("postgres: Begin: %w", err)
	}
	t := &Txn{s: s, call: c, ids: ids}
	if err := t.begin(wait, first); err != nil {
		t.release()
		c.end()
		return nil, nil, fmt.Errorf("postgres: Begin: %w", c.stopCause(err))
	}
	var fctx context.Context
	fctx, t.effects = effects.New(c.ctx)
	return t, txnest.WithScope(fctx, &txScope{Store: s, Tx: t.tx}), nil
}

// begin takes the turns and a connection, and sends the first round trip.
func (t *Txn) begin(wait time.Duration, first *pgx.Batch) error {
	wctx, cancel := context.WithTimeout(t.call.ctx, wait)
	defer cancel()
	for _, id := range t.ids {
		if err := t.s.serial.take(wctx, t.s.ctx.Done(), id); err != nil {
			if errors.Is(err, context.DeadlineExceeded) && t.call.ctx.Err() == nil {
				return fmt.Errorf("%w: waited %v for this node's turn", lockstore.ErrTimeout, wait)
			}
			return fmt.Errorf("waiting for this node's turn: %w", err)
		}
		t.turns++
	}
	pc, err := t.s.pool.Acquire(wctx)
	if err != nil {
		return fmt.Errorf("acquire a connection: %w", err)
	}
	t.pooled, t.conn = pc, pc.Conn()
	if err := t.call.use(t.conn.PgConn().Conn()); err != nil {
		return err
	}
	timeout, _ := lockTimeout(wctx)
	stmt := strconv.FormatInt(max(t.s.cfg.StatementTimeout.Milliseconds(), 1), 10)
	ns, ids := make([]int32, len(t.ids)), make([]int32, len(t.ids))
	for i, id := range t.ids {
		ns[i], ids[i] = id.Namespace, id.ID
	}
	var b pgx.Batch
	b.BeginTx(pgx.TxOptions{})
	b.Queue(txnLockSQL, stmt, strconv.FormatInt(timeout, 10), ns, ids)
	if first != nil {
		b.QueuedQueries = append(b.QueuedQueries, first.QueuedQueries...)
	}
	bctx, cancelB := t.s.statementBound(t.call.ctx)
	defer cancelB()
	br := t.conn.SendBatch(bctx, &b)
	t.tx = br.Tx()
	if err := br.Close(); err != nil {
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && pgErr.Code == sqlstateLockNotAvailable {
			// The wait's own bound, set as lock_timeout: not the caller's
			// deadline.
			err = fmt.Errorf("%w: waited %v for the locks: %w", lockstore.ErrTimeout, wait, err)
		} else {
			err = lockWaitError(t.call.ctx, err, false)
		}
		if t.tx != nil && !t.conn.IsClosed() && t.conn.PgConn().TxStatus() != 'I' {
			if rbErr := t.rollbackTx(); rbErr != nil {
				err = errors.Join(err, fmt.Errorf("rollback: %w", rbErr))
			}
		}
		return err
	}
	return nil
}

// txnLockSQL is Begin's statement after BEGIN, its expressions evaluated
// in order: it sets the transaction's statement_timeout ($1 ms, unless one
// is in force) and idle_in_transaction_session_timeout ($1 ms), saves the
// lock_timeout in force and sets the lock waits' ($2 ms), takes the xact
// locks of the ids ($3 namespaces, $4 ids) one after the other in the
// arrays' order, then restores the saved lock_timeout.
const txnLockSQL = "select set_config('statement_timeout', case current_setting('statement_timeout') when '0' then $1 else current_setting('statement_timeout') end, true), " +
	"set_config('idle_in_transaction_session_timeout', $1, true), " +
	"set_config('claimbus.saved_lock_timeout', current_setting('lock_timeout'), true), set_config('lock_timeout', $2, true), " +
	"(select count(pg_advisory_xact_lock(k.ns, k.id)) from unnest($3::int4[], $4::int4[]) as k(ns, id)), " +
	"set_config('lock_timeout', current_setting('claimbus.saved_lock_timeout'), true)"

// Tx is the transaction.
func (t *Txn) Tx() pgx.Tx { return t.tx }

// Commit sends the queries queued on last (nil: none) and COMMIT in one
// round trip, releases the connection and the turns, then runs the
// effects registered with lockstore.AfterCommit. When ctx is done, or the
// store is closing, it rolls back instead and says so. An error matching
// ErrOutcomeUnknown means the COMMIT was sent and not answered; any other
// error means nothing committed. A query of last that fails fails the
// commit.
func (t *Txn) Commit(ctx context.Context, last *pgx.Batch) (err error) {
	if t.ended {
		return errors.New("postgres: Txn.Commit: the transaction has ended")
	}
	defer t.call.end()
	if err := cmp.Or(ctx.Err(), t.call.reason()); err != nil {
		return errors.Join(fmt.Errorf("postgres: Txn.Commit: not committed: %w", err), t.rollback())
	}
	var b pgx.Batch
	if last != nil {
		b.QueuedQueries = append(b.QueuedQueries, last.QueuedQueries...)
	}
	b.Queue("commit").Exec(func(tag pgconn.CommandTag) error {
		if tag.String() != "COMMIT" {
			// The transaction had failed: COMMIT rolled it back.
			return pgx.ErrTxCommitRollback
		}
		return nil
	})
	cctx, cancel := t.s.statementBound(ctx)
	err = t.conn.SendBatch(cctx, &b).Close()
	cancel()
	var pgErr *pgconn.PgError
	unknown := err != nil && !errors.As(err, &pgErr) && !errors.Is(err, pgx.ErrTxCommitRollback) && !pgconn.SafeToRetry(err)
	if err != nil && !unknown {
		// A query of last failed and the transaction is aborted: roll it
		// back so that the connection goes back to the pool usable.
		_ = t.rollbackTx()
	}
	t.ended = true
	t.release()
	switch {
	case unknown:
		return fmt.Errorf("%w: %w", ErrOutcomeUnknown, err)
	case err != nil:
		return fmt.Errorf("postgres: Txn.Commit: not committed: %w", err)
	}
	t.effects.Run()
	return nil
}

// Rollback rolls the transaction back and releases the connection and the
// turns. It does nothing after Commit or an earlier Rollback.
func (t *Txn) Rollback() error {
	if t.ended {
		return nil
	}
	defer t.call.end()
	return t.rollback()
}

func (t *Txn) rollback() error {
	t.ended = true
	err := t.rollbackTx()
	if errors.Is(err, pgx.ErrTxClosed) {
		err = nil
	}
	t.release()
	if err != nil {
		return fmt.Errorf("postgres: Txn.Rollback: %w", err)
	}
	return nil
}

// rollbackTx rolls back on the connection, bounded by cleanupContext.
func (t *Txn) rollbackTx() error {
	if t.conn.IsClosed() {
		return nil
	}
	ctx, cancel := t.s.cleanupContext()
	defer cancel()
	_, err := t.conn.Exec(ctx, "rollback")
	return err
}

// release gives back the connection (pgxpool destroys one that is closed
// or still in a transaction) and the turns.
func (t *Txn) release() {
	t.pooled = releasePooled(t.call, t.pooled, t.conn)
	for _, id := range t.ids[:t.turns] {
		t.s.serial.pass(id)
	}
	t.turns = 0
}

// TxFrom returns the PostgreSQL transaction ctx carries: a Txn's, a
// Serialize call's, or one attached with WithTx.
func TxFrom(ctx context.Context) (pgx.Tx, bool) {
	sc := txnest.Carried[*Store, pgx.Tx, LockID](ctx)
	if sc == nil {
		return nil, false
	}
	return sc.Tx, true
}
