package postgres

import (
	"context"
	"sync"

	"github.com/jackc/pgx/v5"

	"github.com/claimbus/claimbus/lockstore"
	"github.com/claimbus/claimbus/lockstore/internal/txnest"
)

// txScope is the open transaction a ctx carries: one opened by Serialize
// (Store is that Store) or the caller's own, attached with WithTx (Store is
// nil: every Store uses it). Held is the locks it holds, by lock id.
type txScope = txnest.Scope[*Store, pgx.Tx, LockID]

// txScopeFor returns the transaction ctx carries that s must run in, or nil
// (txnest.ScopeFor).
func txScopeFor(ctx context.Context, s *Store) *txScope {
	return txnest.ScopeFor[*Store, pgx.Tx, LockID](ctx, s)
}

// exclusiveScope is the session lock an Exclusive call holds, carried by
// the ctx its fn gets. Calls of Exclusive nest: parent is the enclosing one.
type exclusiveScope struct {
	store  *Store
	id     LockID
	token  int64 // the fencing token of the session lock
	conn   *pgx.Conn
	parent *exclusiveScope // the enclosing Exclusive call (any store), or nil
	mu     sync.Mutex      // one Serialize at a time on conn
}

type exclusiveScopeKey struct{}

// exclusiveScopeFor returns the innermost Exclusive call of s that ctx runs
// in, or nil.
func exclusiveScopeFor(ctx context.Context, s *Store) *exclusiveScope {
	sc, _ := ctx.Value(exclusiveScopeKey{}).(*exclusiveScope)
	for ; sc != nil; sc = sc.parent {
		if sc.store == s {
			return sc
		}
	}
	return nil
}

// exclusiveHolding returns the Exclusive call of s on id that ctx runs in,
// however deep, or nil. Its session holds id for the whole call chain:
// waiting for id again, on the node-local mutex or from another
// connection, would wait for that call, which waits for ctx's.
func exclusiveHolding(ctx context.Context, s *Store, id LockID) *exclusiveScope {
	sc, _ := ctx.Value(exclusiveScopeKey{}).(*exclusiveScope)
	for ; sc != nil; sc = sc.parent {
		if sc.store == s && sc.id == id {
			return sc
		}
	}
	return nil
}

// withExclusiveScope returns a ctx carrying sc, inside the Exclusive call
// ctx carries, if any.
func withExclusiveScope(ctx context.Context, sc *exclusiveScope) context.Context {
	sc.parent, _ = ctx.Value(exclusiveScopeKey{}).(*exclusiveScope)
	return context.WithValue(ctx, exclusiveScopeKey{}, sc)
}

// Store is the lockstore.TxLocker of PostgreSQL: Serialize's transactions
// are pgx.Tx, and Exclusive's fn gets a *pgx.Conn.
var _ lockstore.TxLocker[pgx.Tx, *pgx.Conn] = (*Store)(nil)

// Serialize is the package's Serialize for a fn that returns only an
// error: the method of lockstore.TxLocker.
func (s *Store) Serialize(ctx context.Context, key lockstore.Key, fn func(ctx context.Context, tx pgx.Tx) error) error {
	_, err := Serialize(ctx, s, key, txnest.Unit(fn))
	return err
}

// Exclusive is the package's Exclusive for a fn that returns only an
// error: the method of lockstore.TxLocker.
func (s *Store) Exclusive(ctx context.Context, key lockstore.Key, fn func(ctx context.Context, conn *pgx.Conn) error) error {
	_, err := Exclusive(ctx, s, key, txnest.Unit(fn))
	return err
}

// WithTx returns a ctx that carries tx, a transaction the caller opened and
// will end, and the effects registered in it with lockstore.AfterCommit.
//
// Serialize and Exclusive called with the returned ctx (on any Store of
// tx's database) run inside tx, as nested calls do
// (docs/lockstore.md#serialize-on-postgresql-nested-calls): each runs its
// fn in a savepoint of tx, skips the node-local mutex, takes the key's
// pg_advisory_xact_lock on tx (once per key: the same key again reuses the
// lock and its token) and leaves the commit to the caller. The locks are
// released when tx ends. Attach only a transaction on the database the
// stores lock on.
//
// The effects belong to the caller's transaction: lockstore.AfterCommit
// inside the returned ctx registers into effects instead of running at
// once, so nothing runs before the caller's commit. Call effects.Run after
// tx commits; on rollback drop it. Effects never run are lost, never run
// early.
//
//	tx, err := pool.Begin(ctx)
//	if err != nil {
//		return err
//	}
//	defer tx.Rollback(ctx)
//	ctx, effects := store.WithTx(ctx, tx)
//	if _, err := postgres.Serialize(ctx, store, key, work); err != nil {
//		return err
//	}
//	if err := tx.Commit(ctx); err != nil {
//		return err
//	}
//	effects.Run()
//
// Any Store of tx's database joins tx, not only s: it is the method of
// lockstore.TxLocker.
func (s *Store) WithTx(ctx context.Context, tx pgx.Tx) (context.Context, *lockstore.Effects) {
	ctx, effects := lockstore.NewEffects(ctx)
	return txnest.WithScope(ctx, &txScope{Tx: tx}), effects
}
