package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"time"

	"github.com/claimbus/claimbus/claimstore"
	"github.com/claimbus/claimbus/claimstore/internal/claimcheck"
	"github.com/claimbus/claimbus/internal/claimtx"
	"github.com/claimbus/claimbus/lockstore"
)

func init() {
	claimtx.SQLiteOf = func(store any) any { return txStatements{store.(*Store)} }
}

// txStatements are the statements of a Store that txcommand runs in the
// caller's transaction.
type txStatements struct{ *Store }

func (s txStatements) Outcome(ctx context.Context, tx *sql.Tx, key lockstore.Key) (claimstore.Outcome, bool, error) {
	return s.outcome(ctx, tx, key)
}

func (s txStatements) SaveOutcome(ctx context.Context, tx *sql.Tx, key lockstore.Key, o claimstore.Outcome, retention time.Duration) error {
	if err := claimcheck.Save(ctx, key, retention); err != nil {
		return err
	}
	if _, err := tx.ExecContext(ctx, saveOutcomeSQL,
		key.Namespace, key.ID, o.Fingerprint, o.Result, o.Err, after(s.nowNanos(), retention)); err != nil {
		return fail("SaveOutcome", err)
	}
	return nil
}

func (s txStatements) Lookup(ctx context.Context, tx *sql.Tx, key lockstore.Key, lookup string) (taken bool, owner string, err error) {
	if err := tx.QueryRowContext(ctx, `SELECT EXISTS (`+lookup+`)`, key.ID).Scan(&taken); err != nil {
		return false, "", fail("Lookup", err)
	}
	err = tx.QueryRowContext(ctx, `SELECT owner FROM claimbus_reservation WHERE namespace = ? AND id = ?`,
		key.Namespace, key.ID).Scan(&owner)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return false, "", fail("Lookup", err)
	}
	return taken, owner, nil
}

func (s txStatements) Reserve(ctx context.Context, tx *sql.Tx, key lockstore.Key, owner string) error {
	if err := claimcheck.Owned(ctx, key, owner); err != nil {
		return err
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO claimbus_reservation (namespace, id, owner, confirmed, at) VALUES (?, ?, ?, 1, ?)`,
		key.Namespace, key.ID, owner, s.nowNanos()); err != nil {
		return fail("Reserve", err)
	}
	return nil
}
