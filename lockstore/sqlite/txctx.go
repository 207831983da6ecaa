package sqlite

import (
	"context"
	"database/sql"

	"github.com/claimbus/claimbus/lockstore/internal/effects"

	"github.com/claimbus/claimbus/lockstore"
	"github.com/claimbus/claimbus/lockstore/internal/txnest"
)

// Querier is what *sql.DB, *sql.Conn and *sql.Tx have in common: what
// Exclusive hands its fn, which runs in a transaction or not depending on
// where it is called.
type Querier interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
	PrepareContext(ctx context.Context, query string) (*sql.Stmt, error)
}

var (
	_ Querier = (*sql.DB)(nil)
	_ Querier = (*sql.Conn)(nil)
	_ Querier = (*sql.Tx)(nil)
)

// txScope is the open transaction a ctx carries: one opened by Serialize
// (Store is that Store) or the caller's own, attached with WithTx (Store is
// nil: every Store uses it). Held is the keys it has tokens for.
type txScope = txnest.Scope[*Store, *sql.Tx, lockstore.Key]

// txScopeFor returns the transaction ctx carries that s must run in, or
// nil (txnest.ScopeFor): a transaction Serialize opened on another Store
// is on another database file, so s does not join it.
func txScopeFor(ctx context.Context, s *Store) *txScope {
	return txnest.ScopeFor[*Store, *sql.Tx, lockstore.Key](ctx, s)
}

// exclusiveScope is one call of Exclusive, carried by the ctx its fn gets,
// so that Serialize and Exclusive inside it on the same key do not wait for
// the lock their caller holds.
type exclusiveScope struct {
	store  *Store
	key    lockstore.Key
	token  int64
	parent *exclusiveScope
}

type exclusiveScopeKey struct{}

// exclusiveHolding returns the Exclusive call of s on key that ctx runs
// inside, however deep, or nil.
func exclusiveHolding(ctx context.Context, s *Store, key lockstore.Key) *exclusiveScope {
	sc, _ := ctx.Value(exclusiveScopeKey{}).(*exclusiveScope)
	for ; sc != nil; sc = sc.parent {
		if sc.store == s && sc.key == key {
			return sc
		}
	}
	return nil
}

func withExclusiveScope(ctx context.Context, s *Store, key lockstore.Key, token int64) context.Context {
	parent, _ := ctx.Value(exclusiveScopeKey{}).(*exclusiveScope)
	return context.WithValue(ctx, exclusiveScopeKey{}, &exclusiveScope{store: s, key: key, token: token, parent: parent})
}

// Store is the lockstore.TxLocker of SQLite: Serialize's transactions are
// *sql.Tx, and Exclusive's fn gets a Querier.
var _ lockstore.TxLocker[*sql.Tx, Querier] = (*Store)(nil)

// Serialize runs fn in a transaction begun IMMEDIATE while holding key's
// in-process lock, so that one fn at a time runs for key.
//
// Callers for one key queue on the store's lock, first come first served;
// the one at its head then waits for the write gate of the store's
// *sql.DB (SQLite has one writer: Serialize and Begin transactions, and
// the writes of a claimstore/sqlite Store on the same handle, take turns
// in Go, first come first served) and begins with BEGIN IMMEDIATE, which
// takes SQLite's write lock at once, so that fn's reads and writes see no
// other writer. A writer outside the gate (another handle, another
// process) holding the write lock is waited for up to the busy timeout;
// when that runs out, the error matches lockstore.ErrTimeout. A write at
// the gate from inside fn (a claimstore/sqlite call with fn's ctx) would
// wait for fn: it fails at once.
//
// ctx bounds the waits and the transaction: a wait ctx ends returns an
// error matching ctx's error, and when ctx is done before the commit, the
// transaction rolls back.
//
// fn gets a ctx that carries the transaction and a fencing token
// (lockstore.TokenFrom), drawn once the write lock is taken: greater than
// every token Serialize and Exclusive handed out before on this database
// file, across restarts of the store (the tokens' high-water mark is kept
// in the table claimbus_token, see New). When fn returns an error or
// panics, the transaction rolls back: the error comes back as is, joined
// with the rollback's error (wrapped) if that failed too, and a panic goes
// on after the rollback and the release. When the store ends the lock
// before the commit (Close, a lease that ran out), the transaction
// rolls back and the error matches lockstore.ErrLockLost. A failed commit
// comes back wrapped.
//
// Nesting inside an open transaction, AfterCommit effects and bad input:
// docs/lockstore.md#serialize-nesting.
func (s *Store) Serialize(ctx context.Context, key lockstore.Key, fn func(ctx context.Context, tx *sql.Tx) error) error {
	_, err := runSerialize(ctx, s, key, txnest.Unit(fn))
	return err
}

// Exclusive runs fn holding key's in-process lock, but not in a
// transaction: for a job that must run once at a time and makes its own
// short writes, each committing (and running its lockstore.AfterCommit
// effects) by itself. fn gets the store's *sql.DB as q. SQLite is a single
// node, so the lock alone gives the once-only guarantee.
//
// fn's ctx carries a fencing token (lockstore.TokenFrom), as in Serialize.
// It is cancelled, with a cause matching lockstore.ErrLockLost, when the
// store ends the lock (Close, a lease that ran out); the error then
// matches lockstore.ErrLockLost too. ctx bounds the wait for the lock.
//
// Inside an open transaction carried by ctx (see Serialize), Exclusive is
// Serialize: fn runs on that transaction, in a savepoint, given as q.
// Inside Exclusive or Serialize on the same key, it does not wait for the
// lock its caller holds, and uses its caller's token.
//
// Bad input gets an error at once, as with Serialize.
func (s *Store) Exclusive(ctx context.Context, key lockstore.Key, fn func(ctx context.Context, q Querier) error) error {
	_, err := runExclusive(ctx, s, key, txnest.Unit(fn))
	return err
}

// WithTx returns a ctx that carries tx, a transaction the caller opened (on
// the database of the stores it will be used with) and will end, and
// afterCommit, which runs the effects registered in it with
// lockstore.AfterCommit.
//
// Serialize and Exclusive called with the returned ctx, on any Store (not
// only s), run fn on tx at once, in a savepoint, as nested calls do (see
// Serialize): they skip the in-process lock (the caller already holds
// SQLite's write lock, or will take it at its first write; waiting for a
// key then could deadlock) and leave the commit to the caller.
//
// lockstore.AfterCommit inside the returned ctx registers its effects
// instead of running them at once. Call afterCommit after tx commits, not
// on rollback.
//
//	tx, err := db.BeginTx(ctx, nil)
//	if err != nil {
//		return err
//	}
//	defer tx.Rollback()
//	ctx, afterCommit := store.WithTx(ctx, tx)
//	if err := store.Serialize(ctx, key, work); err != nil {
//		return err
//	}
//	if err := tx.Commit(); err != nil {
//		return err
//	}
//	afterCommit()
func (s *Store) WithTx(ctx context.Context, tx *sql.Tx) (context.Context, func()) {
	ctx, scope := effects.New(ctx)
	return txnest.WithScope(ctx, &txScope{Tx: tx}), scope.Run
}
