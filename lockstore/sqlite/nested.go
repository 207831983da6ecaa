package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/claimbus/claimbus/lockstore"
)

// nestedSavepoint is the savepoint each nested Serialize runs in. Nested
// calls nest strictly, so one name serves them all (SQLite uses the most
// recent savepoint of a name).
const nestedSavepoint = "claimbus_nest"

// nestedSerialize is Serialize inside an open transaction sc: fn runs at
// once in a savepoint of it, with key's token in the transaction (a new
// one for a key it has none for) and effects of its own. A failed fn rolls
// back to the savepoint; a successful one releases it.
func nestedSerialize[T any](ctx context.Context, s *Store, sc *txScope, key lockstore.Key, fn func(ctx context.Context, tx *sql.Tx) (T, error)) (T, error) {
	var zero T
	n, fctx, err := sc.enter(ctx, s, key)
	if err != nil {
		return zero, err
	}
	// On a panic in fn, end rolls back to the savepoint before the panic
	// goes on; after release or rollback it does nothing.
	defer n.end()
	v, err := fn(fctx, sc.tx)
	if err != nil {
		return zero, n.rollback(err)
	}
	if err := n.release(); err != nil {
		return zero, err
	}
	return v, nil
}

// nestedCall is one nested Serialize, in its savepoint.
type nestedCall struct {
	sc      *txScope
	key     lockstore.Key
	drew    bool // this call drew key's token: rolling back forgets it
	effects *lockstore.Effects
	ended   bool
}

// enter opens the savepoint and returns the ctx fn runs with. The token is
// key's in the transaction, or an enclosing Exclusive's on key, or else a
// new one (which the transaction keeps for key unless the savepoint rolls
// back).
func (sc *txScope) enter(ctx context.Context, s *Store, key lockstore.Key) (*nestedCall, context.Context, error) {
	n := &nestedCall{sc: sc, key: key}
	token, ok := sc.token(key)
	if !ok {
		if holder := exclusiveHolding(ctx, s, key); holder != nil {
			token, ok = holder.token, true
		}
	}
	if !ok {
		var err error
		if token, err = s.tokens.draw(); err != nil {
			return nil, nil, fmt.Errorf("sqlite: Serialize %q: %w", key, err)
		}
	}
	if _, err := sc.tx.ExecContext(ctx, "SAVEPOINT "+nestedSavepoint); err != nil {
		return nil, nil, fmt.Errorf("sqlite: Serialize %q: savepoint: %w", key, err)
	}
	if !ok {
		sc.setToken(key, token)
		n.drew = true
	}
	fctx, effects := lockstore.NestEffects(ctx)
	n.effects = effects
	return n, lockstore.ContextWithToken(fctx, token), nil
}

// release releases the savepoint once fn has succeeded and merges the
// effects registered inside into the enclosing scope. When that fails, it
// rolls back to the savepoint and returns the error.
func (n *nestedCall) release() error {
	n.ended = true
	if _, err := n.sc.tx.ExecContext(context.Background(), "RELEASE "+nestedSavepoint); err != nil {
		err = fmt.Errorf("sqlite: Serialize %q: release the savepoint: %w", n.key, err)
		if rbErr := n.rollbackToSavepoint(); rbErr != nil {
			err = errors.Join(err, fmt.Errorf("rollback to savepoint: %w", rbErr))
		}
		return err
	}
	n.effects.Merge()
	return nil
}

// rollback rolls back to the savepoint after fnErr, dropping fn's writes
// and the effects registered inside, and returns fnErr joined with the
// rollback's error, if any.
func (n *nestedCall) rollback(fnErr error) error {
	n.ended = true
	if err := n.rollbackToSavepoint(); err != nil {
		return errors.Join(fnErr, fmt.Errorf("sqlite: Serialize %q: rollback to savepoint: %w", n.key, err))
	}
	return fnErr
}

// end rolls back to the savepoint unless release or rollback did already.
func (n *nestedCall) end() {
	if !n.ended {
		n.ended = true
		_ = n.rollbackToSavepoint()
	}
}

// rollbackToSavepoint undoes everything since the savepoint, and ends it.
func (n *nestedCall) rollbackToSavepoint() error {
	if n.drew {
		n.sc.forget(n.key)
		n.drew = false
	}
	// Not ctx: undoing must work after ctx is done.
	if _, err := n.sc.tx.ExecContext(context.Background(), "ROLLBACK TO "+nestedSavepoint); err != nil {
		return err
	}
	_, err := n.sc.tx.ExecContext(context.Background(), "RELEASE "+nestedSavepoint)
	return err
}
