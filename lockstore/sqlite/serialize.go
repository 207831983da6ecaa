package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/claimbus/claimbus/lockstore/internal/effects"

	"github.com/claimbus/claimbus/internal/sqlitegate"
	"github.com/claimbus/claimbus/lockstore"
	"github.com/claimbus/claimbus/lockstore/internal/txnest"
)

// runSerialize is Store.Serialize for a fn that returns a value.
func runSerialize[T any](ctx context.Context, s *Store, key lockstore.Key, fn func(ctx context.Context, tx *sql.Tx) (T, error)) (T, error) {
	var zero T
	if err := s.precheck("Serialize", key, fn == nil); err != nil {
		return zero, err
	}
	defer s.exit()
	if sc := txScopeFor(ctx, s); sc != nil {
		return nestedSerialize(ctx, s, sc, key, fn)
	}
	st, fctx, err := s.begin(ctx, key)
	if err != nil {
		return zero, err
	}
	return txnest.RunOutermost(ctx, fctx, st, st.tx, fn)
}

// precheck validates the arguments of Serialize and Exclusive and counts
// the call in (Store.enter): on success the caller must call s.exit.
func (s *Store) precheck(op string, key lockstore.Key, nilFn bool) error {
	switch {
	case s == nil:
		return fmt.Errorf("sqlite: %s %q: nil *Store", op, key)
	case nilFn:
		return fmt.Errorf("sqlite: %s %q: nil fn", op, key)
	}
	if err := key.Validate(); err != nil {
		return fmt.Errorf("sqlite: %s: %w", op, err)
	}
	if err := s.enter(); err != nil {
		return fmt.Errorf("sqlite: %s %q: %w", op, key, err)
	}
	return nil
}

// serialTxn is one outermost transaction of Serialize.
type serialTxn struct {
	s       *Store
	key     lockstore.Key
	lock    lockstore.Lock // nil inside Exclusive on the same key
	turn    *sqlitegate.Turn
	tx      *sql.Tx
	effects *effects.Scope
	done    bool
}

// begin takes key's lock (unless an enclosing Exclusive holds it), the
// write gate and a transaction, draws the token (an enclosing Exclusive's
// on key, else a new one, once the write lock is taken) and returns the
// ctx fn runs in.
func (s *Store) begin(ctx context.Context, key lockstore.Key) (*serialTxn, context.Context, error) {
	st := &serialTxn{s: s, key: key}
	holder := exclusiveHolding(ctx, s, key)
	if holder == nil {
		l, err := s.mem.Lock(ctx, key)
		if err != nil {
			return nil, nil, fmt.Errorf("sqlite: Serialize %q: wait for the lock: %w", key, err)
		}
		st.lock = l
	}
	turn, err := s.gate.Enter(ctx)
	if err != nil {
		st.releaseLock()
		return nil, nil, fmt.Errorf("sqlite: Serialize %q: wait for the write gate: %w", key, err)
	}
	st.turn = turn
	fail := func(err error) (*serialTxn, context.Context, error) {
		turn.Leave()
		st.releaseLock()
		return nil, nil, err
	}
	// Before the transaction: a reservation takes the write lock.
	if err := s.tokens.refill(ctx); err != nil {
		return fail(fmt.Errorf("sqlite: Serialize %q: %w", key, err))
	}
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return fail(beginError(ctx, "Serialize", key, err))
	}
	st.tx = tx
	var token int64
	if holder != nil {
		token = holder.token
	} else if token, err = s.tokens.draw(); err != nil {
		_ = tx.Rollback()
		return fail(fmt.Errorf("sqlite: Serialize %q: %w", key, err))
	}
	var fctx context.Context
	fctx, st.effects = effects.New(ctx)
	fctx = effects.WithToken(fctx, token)
	sc := &txScope{Store: s, Tx: tx}
	sc.Held.Init(key, token)
	return st, txnest.WithScope(turn.Context(fctx), sc), nil
}

// beginError explains a failed BEGIN IMMEDIATE.
func beginError(ctx context.Context, op string, key lockstore.Key, err error) error {
	switch {
	case ctx.Err() != nil:
		return fmt.Errorf("sqlite: %s %q: begin: %w (%w)", op, key, ctx.Err(), err)
	case isBusy(err):
		return fmt.Errorf("sqlite: %s %q: begin: another connection held the write lock past the busy timeout: %w (%w)",
			op, key, lockstore.ErrTimeout, err)
	}
	return fmt.Errorf("sqlite: %s %q: begin: %w", op, key, err)
}

// Commit commits unless the lock was lost, releases, and runs the effects
// registered with lockstore.AfterCommit.
func (st *serialTxn) Commit(ctx context.Context) error {
	if st.lost() {
		return st.Rollback(fmt.Errorf("sqlite: Serialize %q: %w before the commit", st.key, lockstore.ErrLockLost))
	}
	err := st.tx.Commit()
	st.finish()
	if err != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("sqlite: Serialize %q: commit: %w (%w)", st.key, ctx.Err(), err)
		}
		return fmt.Errorf("sqlite: Serialize %q: commit: %w", st.key, err)
	}
	st.effects.Run()
	return nil
}

// Rollback rolls back because of cause, releases, and returns cause joined
// with the rollback's error, if any. A transaction database/sql already
// rolled back (its ctx ended) is not an error.
func (st *serialTxn) Rollback(cause error) error {
	err := st.tx.Rollback()
	st.finish()
	if err != nil && !errors.Is(err, sql.ErrTxDone) {
		return errors.Join(cause, fmt.Errorf("sqlite: Serialize %q: rollback: %w", st.key, err))
	}
	return cause
}

// End rolls back a transaction neither committed nor rolled back (fn
// panicked).
func (st *serialTxn) End() {
	if !st.done {
		_ = st.tx.Rollback()
		st.finish()
	}
}

// finish gives the gate and the lock up.
func (st *serialTxn) finish() {
	st.done = true
	st.turn.Leave()
	st.releaseLock()
}

func (st *serialTxn) releaseLock() {
	if st.lock != nil {
		_ = st.lock.Release(context.Background())
	}
}

// lost reports whether the store ended the lock.
func (st *serialTxn) lost() bool {
	if st.lock == nil {
		return false
	}
	select {
	case <-st.lock.Lost():
		return true
	default:
		return false
	}
}

// runExclusive is Store.Exclusive for a fn that returns a value.
func runExclusive[T any](ctx context.Context, s *Store, key lockstore.Key, fn func(ctx context.Context, q Querier) (T, error)) (T, error) {
	var zero T
	if err := s.precheck("Exclusive", key, fn == nil); err != nil {
		return zero, err
	}
	defer s.exit()
	if sc := txScopeFor(ctx, s); sc != nil {
		return nestedSerialize(ctx, s, sc, key, func(ctx context.Context, tx *sql.Tx) (T, error) {
			return fn(ctx, tx)
		})
	}
	if holder := exclusiveHolding(ctx, s, key); holder != nil {
		return fn(effects.WithToken(ctx, holder.token), s.db)
	}
	l, err := s.mem.Lock(ctx, key)
	if err != nil {
		return zero, fmt.Errorf("sqlite: Exclusive %q: wait for the lock: %w", key, err)
	}
	defer func() { _ = l.Release(context.Background()) }()
	if err := s.tokens.refill(ctx); err != nil {
		return zero, fmt.Errorf("sqlite: Exclusive %q: %w", key, err)
	}
	token, err := s.tokens.draw()
	if err != nil {
		return zero, fmt.Errorf("sqlite: Exclusive %q: %w", key, err)
	}

	fctx, cancel := context.WithCancelCause(withExclusiveScope(effects.WithToken(ctx, token), s, key, token))
	defer cancel(nil)
	lostErr := fmt.Errorf("sqlite: Exclusive %q: %w", key, lockstore.ErrLockLost)
	stop := lockstore.AfterLost(l, func() { cancel(lostErr) })
	// Deferred, so that a panicking fn stops the watch too.
	defer stop()
	v, err := fn(fctx, s.db)
	// Ask the lock, not the watch: when fn returns just as the lock is
	// lost, its context may not be cancelled yet.
	select {
	case <-l.Lost():
		return zero, errors.Join(lostErr, err)
	default:
	}
	if err != nil {
		return zero, err
	}
	return v, nil
}
