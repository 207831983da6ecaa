package postgres

import (
	"context"
	"sync"

	"github.com/claimbus/claimbus/lockstore/internal/effects"

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

// Serialize runs fn in a transaction that holds key's
// pg_advisory_xact_lock, so that one fn at a time runs for key across every
// node sharing the database. A node's callers
// for one key queue on a node-local mutex first, so waiters never drain
// the pool; BEGIN, the lock and the token take one round trip.
//
// ctx bounds the wait: its deadline becomes the transaction's lock_timeout
// (an error matching lockstore.ErrTimeout and context.DeadlineExceeded);
// without one, Config.StatementTimeout bounds every statement
// (lockstore.ErrTimeout). A wait that ctx ends returns ctx's error.
//
// fn gets a ctx that carries the transaction and the fencing token of
// key's lock (lockstore.TokenFrom), greater than every token drawn before
// on any node. When fn returns an error or panics, or ctx is done by the
// time fn returns, the transaction rolls back: fn's error comes back as is
// (joined with the rollback's error if that failed), a panic goes on after
// the rollback. A failed commit comes back wrapped, matching
// lockstore.ErrLockLost when the session ended before or during it. fn's
// ctx is cancelled when Serialize returns. Close cancels fn's ctx and rolls back (lockstore.ErrClosed).
//
// Inside an open transaction carried by ctx (an outer Serialize, or Store.WithTx),
// Serialize runs fn in a savepoint, taking key's lock there unless the
// transaction holds it; when fn fails, its writes, lock and effects roll
// back to the savepoint and the outermost fn decides the commit. Functions
// registered with lockstore.AfterCommit run after the outermost commit, in
// order, and never on rollback. Keep fn to database work: anything slow in
// it holds the lock.
//
// Bad input (a nil fn, an invalid key) gets an error at once, one
// matching lockstore.ErrInvalidKey for a key; a closed store gets one
// matching lockstore.ErrClosed. The call is a step a tracer in ctx sees
// (observe.StepSerialize), and fn's context carries it.
//
// docs/lockstore.md#serialize-on-postgresql has the details: timeouts,
// tokens after a crash, Close, nesting (and inside Exclusive), effects,
// and an example.
func (s *Store) Serialize(ctx context.Context, key lockstore.Key, fn func(ctx context.Context, tx pgx.Tx) error) error {
	_, err := runSerialize(ctx, s, key, txnest.Unit(fn))
	return err
}

// Exclusive runs fn holding key's session advisory lock, outside any
// transaction, for a job that must run once cluster-wide and makes its own
// short writes (each commits, and runs its AfterCommit effects, by itself).
//
// fn gets a connection of its own, taken from the store's pool and never
// given back to it (it would still hold the lock); fn may use it, the pool,
// or Serialize, which for fn's ctx runs on this connection. A node's
// callers for key queue in Go, then wait on the server until no other node
// holds key. ctx bounds the wait, as in Serialize: its deadline, or else
// Config.StatementTimeout, ends it with lockstore.ErrTimeout.
//
// fn's ctx carries the fencing token of the lock (lockstore.TokenFrom),
// greater than every token drawn before on any node: pass it to the
// resources fn writes, so that they can refuse a holder that lost the
// lock. fn's ctx is cancelled, with a cause matching lockstore.ErrLockLost,
// within Config.LeaseBound of a loss, and with lockstore.ErrClosed when
// the store closes. fn should then stop: another node may already run the
// job, with a greater token.
//
// When fn returns (or panics) Exclusive unlocks, checks that the unlock
// freed the lock, and closes the connection. The error is fn's, joined with one matching lockstore.ErrLockLost when
// the lock was lost or could not be confirmed to the end (the run may not
// have been alone), or lockstore.ErrClosed.
//
// Inside an open transaction carried by ctx (see Serialize and Store.WithTx),
// Exclusive is Serialize: it takes key's lock on that transaction, in a
// savepoint, and fn gets the transaction's connection. Inside an Exclusive
// on the same store and key, however deep, it runs fn at once on that
// call's connection, with that call's token.
//
// docs/lockstore.md#exclusive-on-postgresql has the details (the watcher,
// Close, an example).
func (s *Store) Exclusive(ctx context.Context, key lockstore.Key, fn func(ctx context.Context, conn *pgx.Conn) error) error {
	_, err := runExclusive(ctx, s, key, txnest.Unit(fn))
	return err
}

// WithTx returns a ctx that carries tx, a transaction the caller opened and
// will end, and afterCommit, which runs the effects registered in it with
// lockstore.AfterCommit.
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
// inside the returned ctx registers them instead of running them at once,
// so nothing runs before the caller's commit. Call afterCommit after tx
// commits, not on rollback. Effects never run are lost, never run early.
//
//	tx, err := pool.Begin(ctx)
//	if err != nil {
//		return err
//	}
//	defer tx.Rollback(ctx)
//	ctx, afterCommit := store.WithTx(ctx, tx)
//	if err := store.Serialize(ctx, key, work); err != nil {
//		return err
//	}
//	if err := tx.Commit(ctx); err != nil {
//		return err
//	}
//	afterCommit()
//
// Any Store of tx's database joins tx, not only s: it is the method of
// lockstore.TxLocker.
func (s *Store) WithTx(ctx context.Context, tx pgx.Tx) (context.Context, func()) {
	ctx, scope := effects.New(ctx)
	return txnest.WithScope(ctx, &txScope{Tx: tx}), scope.Run
}
