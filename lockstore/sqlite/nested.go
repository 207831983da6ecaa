package sqlite

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/claimbus/claimbus/lockstore"
	"github.com/claimbus/claimbus/lockstore/internal/txnest"
)

// nestedSerialize is Serialize inside an open transaction sc: fn runs at
// once in a savepoint of it (txnest.Run), with key's token in the
// transaction (a new one for a key it has none for) and effects of its own.
func nestedSerialize[T any](ctx context.Context, s *Store, sc *txScope, key lockstore.Key, fn func(ctx context.Context, tx *sql.Tx) (T, error)) (T, error) {
	return txnest.Run(ctx, "sqlite: Serialize", key, sc.tx, &nestedCall{s: s, sc: sc, key: key}, fn)
}

// nestedCall is one nested Serialize's savepoint (txnest.Savepoint).
type nestedCall struct {
	s    *Store
	sc   *txScope
	key  lockstore.Key
	mark int // the scope's tokens when the savepoint opened (txnest.Held.Mark)
}

// Enter opens the savepoint and returns key's token: key's in the
// transaction, or an enclosing Exclusive's on key, or else a new one (which
// the transaction keeps for key unless the savepoint rolls back). It takes
// no lock: the transaction holds SQLite's write lock.
func (n *nestedCall) Enter(ctx context.Context) (int64, error) {
	sc := n.sc
	n.mark = sc.held.Mark()
	token, ok := sc.held.Token(n.key)
	if !ok {
		if holder := exclusiveHolding(ctx, n.s, n.key); holder != nil {
			token, ok = holder.token, true
		}
	}
	if !ok {
		var err error
		if token, err = n.s.tokens.draw(); err != nil {
			return 0, fmt.Errorf("sqlite: Serialize %q: %w", n.key, err)
		}
	}
	if _, err := sc.tx.ExecContext(ctx, txnest.SavepointSQL); err != nil {
		return 0, fmt.Errorf("sqlite: Serialize %q: savepoint: %w", n.key, err)
	}
	if !ok {
		sc.held.Took(n.key, token)
	}
	return token, nil
}

// Release releases the savepoint once fn has succeeded.
func (n *nestedCall) Release() error {
	_, err := n.sc.tx.ExecContext(context.Background(), txnest.ReleaseSQL)
	return err
}

// Rollback undoes everything since the savepoint, ends it, and forgets the
// tokens drawn inside it.
func (n *nestedCall) Rollback() error {
	n.sc.held.ForgetSince(n.mark)
	// Not ctx: undoing must work after ctx is done.
	if _, err := n.sc.tx.ExecContext(context.Background(), txnest.RollbackToSQL); err != nil {
		return err
	}
	_, err := n.sc.tx.ExecContext(context.Background(), txnest.ReleaseSQL)
	return err
}
