package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/claimbus/claimbus/lockstore/internal/effects"

	"github.com/claimbus/claimbus/internal/lockext"
	"github.com/claimbus/claimbus/internal/sqlitegate"
	"github.com/claimbus/claimbus/lockstore"
	"github.com/claimbus/claimbus/lockstore/internal/txnest"
)

// Txn is a transaction begun IMMEDIATE that holds the in-process locks of
// its keys from Begin to its end: the transaction of a command whose
// claims, writes and stored outcome commit together (see txcommand). A
// Txn belongs to one goroutine.
type Txn struct {
	s       *Store
	locks   []lockstore.Lock
	turn    *sqlitegate.Turn // nil until the gate is entered
	tx      *sql.Tx
	effects *effects.Scope
	ended   bool
}

// Begin opens a transaction holding the lock of each key, as Serialize
// does for one: it takes the keys' locks in lockext.SortKeys order
// (first come first served, so that callers with several keys never wait
// on each other), then the write gate (see Serialize), then begins
// IMMEDIATE. wait bounds the wait for the locks and the gate; a wait past
// it returns an error matching lockstore.ErrTimeout. ctx bounds the
// transaction: when it ends before the commit, database/sql rolls it
// back. With no keys, Begin takes the gate alone: the way for an
// application's writes to take their turn in Go, for at most wait,
// rather than poll in SQLite's busy handler.
//
// The returned ctx, a child of ctx, carries the transaction: TxFrom finds
// it, Serialize and Exclusive on the store nest in it, and
// lockstore.AfterCommit registers effects that run after Commit succeeds.
// End the Txn with Commit or Rollback.
func Begin(ctx context.Context, s *Store, keys []lockstore.Key, wait time.Duration) (*Txn, context.Context, error) {
	switch {
	case s == nil:
		return nil, nil, errors.New("sqlite: Begin: nil *Store")
	case wait <= 0:
		return nil, nil, fmt.Errorf("sqlite: Begin: wait is %v, want > 0", wait)
	}
	keys = lockext.SortKeys(s, slices.Clone(keys))
	for _, k := range keys {
		if err := k.Validate(); err != nil {
			return nil, nil, fmt.Errorf("sqlite: Begin: %w", err)
		}
		if exclusiveHolding(ctx, s, k) != nil {
			return nil, nil, fmt.Errorf("sqlite: Begin inside an Exclusive call on %q: nest with Serialize instead", k)
		}
	}
	if txScopeFor(ctx, s) != nil {
		return nil, nil, errors.New("sqlite: Begin inside a transaction of the store: nest with Serialize instead")
	}
	if err := s.enter(); err != nil {
		return nil, nil, fmt.Errorf("sqlite: Begin: %w", err)
	}
	t := &Txn{s: s}
	if err := t.begin(ctx, keys, wait); err != nil {
		t.release()
		return nil, nil, fmt.Errorf("sqlite: Begin: %w", err)
	}
	var fctx context.Context
	fctx, t.effects = effects.New(t.turn.Context(ctx))
	return t, txnest.WithScope(fctx, &txScope{Store: s, Tx: t.tx}), nil
}

// begin takes the locks and the gate, and begins the transaction.
func (t *Txn) begin(ctx context.Context, keys []lockstore.Key, wait time.Duration) error {
	wctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	timedOut := func(what string, err error) error {
		if errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil {
			return fmt.Errorf("%w: waited %v for %s", lockstore.ErrTimeout, wait, what)
		}
		return fmt.Errorf("wait for %s: %w", what, err)
	}
	for _, k := range keys {
		l, err := t.s.mem.Lock(wctx, k)
		if err != nil {
			return timedOut(fmt.Sprintf("the lock of %q", k), err)
		}
		t.locks = append(t.locks, l)
	}
	turn, err := t.s.gate.Enter(wctx)
	if err != nil {
		return timedOut("the write gate", err)
	}
	t.turn = turn
	// Before the transaction: a reservation takes the write lock.
	if err := t.s.tokens.refill(ctx); err != nil {
		return err
	}
	tx, err := t.s.db.BeginTx(ctx, nil)
	if err != nil {
		if ctx.Err() == nil && isBusy(err) {
			return fmt.Errorf("begin: another connection held the write lock past the busy timeout: %w (%w)", lockstore.ErrTimeout, err)
		}
		return fmt.Errorf("begin: %w", err)
	}
	t.tx = tx
	return nil
}

// Tx is the transaction.
func (t *Txn) Tx() *sql.Tx { return t.tx }

// Commit commits unless the store ended a lock (Close, Reset, a lease
// that ran out: the error then matches lockstore.ErrLockLost), releases
// the locks, and runs the effects registered with lockstore.AfterCommit.
// Any error means that nothing committed: on a local file, a COMMIT that
// fails has rolled back.
func (t *Txn) Commit() error {
	if t.ended {
		return errors.New("sqlite: Txn.Commit: the transaction has ended")
	}
	for _, l := range t.locks {
		select {
		case <-l.Lost():
			return errors.Join(fmt.Errorf("sqlite: Txn.Commit: %w before the commit", lockstore.ErrLockLost), t.Rollback())
		default:
		}
	}
	err := t.tx.Commit()
	t.release()
	if err != nil {
		return fmt.Errorf("sqlite: Txn.Commit: %w", err)
	}
	t.effects.Run()
	return nil
}

// Rollback rolls the transaction back and releases the locks. It does
// nothing after Commit or an earlier Rollback.
func (t *Txn) Rollback() error {
	if t.ended {
		return nil
	}
	err := t.tx.Rollback()
	t.release()
	if err != nil && !errors.Is(err, sql.ErrTxDone) {
		return fmt.Errorf("sqlite: Txn.Rollback: %w", err)
	}
	return nil
}

// release gives the gate and the locks up, and counts the call out.
func (t *Txn) release() {
	t.ended = true
	if t.turn != nil {
		t.turn.Leave()
	}
	for _, l := range t.locks {
		_ = l.Release(context.Background())
	}
	t.locks = nil
	t.s.exit()
}

// TxFrom returns the SQLite transaction ctx carries: a Txn's, a Serialize
// call's, or one attached with WithTx.
func TxFrom(ctx context.Context) (*sql.Tx, bool) {
	sc := txnest.Carried[*Store, *sql.Tx, lockstore.Key](ctx)
	if sc == nil {
		return nil, false
	}
	return sc.Tx, true
}
