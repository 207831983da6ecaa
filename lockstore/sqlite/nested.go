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
// transaction (a new one for a key it has none for, or an enclosing
// Exclusive's on key) and effects of its own. It takes no lock: the
// transaction holds SQLite's write lock.
func nestedSerialize[T any](ctx context.Context, s *Store, sc *txScope, key lockstore.Key, fn func(ctx context.Context, tx *sql.Tx) (T, error)) (T, error) {
	return txnest.Run(ctx, txnest.Nested[*sql.Tx, lockstore.Key]{
		Op: "sqlite: Serialize", Key: key, Tx: sc.Tx, Held: &sc.Held, ID: key,
		Enclosing: func() (int64, bool) {
			if holder := exclusiveHolding(ctx, s, key); holder != nil {
				return holder.token, true
			}
			return 0, false
		},
		Savepoint: savepoint{s: s, tx: sc.Tx, key: key},
	}, fn)
}

// savepoint is a nested Serialize's savepoint (txnest.Savepoint).
type savepoint struct {
	s   *Store
	tx  *sql.Tx
	key lockstore.Key
}

// Open draws a new token unless held, and opens the savepoint.
func (p savepoint) Open(ctx context.Context, token int64, held bool) (int64, error) {
	if !held {
		var err error
		if token, err = p.s.tokens.draw(); err != nil {
			return 0, fmt.Errorf("sqlite: Serialize %q: %w", p.key, err)
		}
	}
	if _, err := p.tx.ExecContext(ctx, txnest.SavepointSQL); err != nil {
		return 0, fmt.Errorf("sqlite: Serialize %q: savepoint: %w", p.key, err)
	}
	return token, nil
}

// Release releases the savepoint once fn has succeeded.
func (p savepoint) Release() error {
	_, err := p.tx.ExecContext(context.Background(), txnest.ReleaseSQL)
	return err
}

// Rollback undoes everything since the savepoint and ends it. Not ctx:
// undoing must work after ctx is done.
func (p savepoint) Rollback() error {
	if _, err := p.tx.ExecContext(context.Background(), txnest.RollbackToSQL); err != nil {
		return err
	}
	_, err := p.tx.ExecContext(context.Background(), txnest.ReleaseSQL)
	return err
}
