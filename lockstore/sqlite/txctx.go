package sqlite

import (
	"context"
	"database/sql"

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

// Serialize is the package's Serialize for a fn that returns only an
// error: the method of lockstore.TxLocker.
func (s *Store) Serialize(ctx context.Context, key lockstore.Key, fn func(ctx context.Context, tx *sql.Tx) error) error {
	_, err := Serialize(ctx, s, key, txnest.Unit(fn))
	return err
}

// Exclusive is the package's Exclusive for a fn that returns only an
// error: the method of lockstore.TxLocker.
func (s *Store) Exclusive(ctx context.Context, key lockstore.Key, fn func(ctx context.Context, q Querier) error) error {
	_, err := Exclusive(ctx, s, key, txnest.Unit(fn))
	return err
}

// WithTx returns a ctx that carries tx, a transaction the caller opened (on
// the database of the stores it will be used with) and will end, and the
// effects registered in it with lockstore.AfterCommit.
//
// Serialize and Exclusive called with the returned ctx, on any Store (not
// only s), run fn on tx at once, in a savepoint, as nested calls do (see
// Serialize): they skip the in-process lock (the caller already holds
// SQLite's write lock, or will take it at its first write; waiting for a
// key then could deadlock) and leave the commit to the caller.
//
// lockstore.AfterCommit inside the returned ctx registers into effects
// instead of running at once. Call effects.Run after tx commits; on
// rollback drop it.
//
//	tx, err := db.BeginTx(ctx, nil)
//	if err != nil {
//		return err
//	}
//	defer tx.Rollback()
//	ctx, effects := store.WithTx(ctx, tx)
//	if _, err := sqlite.Serialize(ctx, store, key, work); err != nil {
//		return err
//	}
//	if err := tx.Commit(); err != nil {
//		return err
//	}
//	effects.Run()
func (s *Store) WithTx(ctx context.Context, tx *sql.Tx) (context.Context, *lockstore.Effects) {
	ctx, effects := lockstore.NewEffects(ctx)
	return txnest.WithScope(ctx, &txScope{Tx: tx}), effects
}
