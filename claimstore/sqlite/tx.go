package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"time"

	"github.com/claimbus/claimbus/claimstore"
	"github.com/claimbus/claimbus/claimstore/internal/claimcheck"
	"github.com/claimbus/claimbus/lockstore"
)

// The Tx methods run the store's statements in tx, a transaction of the
// caller on the store's database (see lockstore/sqlite.Begin), so that
// reservations and outcomes commit with the caller's writes. They bypass
// the store's write gate: tx holds SQLite's write lock already.

// TxOutcome reads key's outcome whose retention has not passed, as
// Outcome does, in tx.
func (s *Store) TxOutcome(ctx context.Context, tx *sql.Tx, key lockstore.Key) (claimstore.Outcome, bool, error) {
	return s.outcome(ctx, tx, key)
}

// TxSaveOutcome writes o under key for retention, replacing any outcome
// stored there, in tx.
func (s *Store) TxSaveOutcome(ctx context.Context, tx *sql.Tx, key lockstore.Key, o claimstore.Outcome, retention time.Duration) error {
	if err := claimcheck.Save(ctx, key, retention); err != nil {
		return err
	}
	if _, err := tx.ExecContext(ctx, saveOutcomeSQL,
		key.Namespace, key.ID, o.Fingerprint, o.Result, o.Err, after(s.nowNanos(), retention)); err != nil {
		return fail("TxSaveOutcome", err)
	}
	return nil
}

// TxLookup runs lookup (SQL given key.ID as $1, returning a row when the
// value is taken) into taken, and reads the owner of key's reservation,
// empty when it has none, in tx.
func (s *Store) TxLookup(ctx context.Context, tx *sql.Tx, key lockstore.Key, lookup string) (taken bool, owner string, err error) {
	if err := tx.QueryRowContext(ctx, `SELECT EXISTS (`+lookup+`)`, key.ID).Scan(&taken); err != nil {
		return false, "", fail("TxLookup", err)
	}
	err = tx.QueryRowContext(ctx, `SELECT owner FROM claimbus_reservation WHERE namespace = ? AND id = ?`,
		key.Namespace, key.ID).Scan(&owner)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return false, "", fail("TxLookup", err)
	}
	return taken, owner, nil
}

// TxReserve inserts owner's confirmed reservation of key in tx. The
// table's primary key is the guarantee: when the value is reserved
// already, the statement fails.
func (s *Store) TxReserve(ctx context.Context, tx *sql.Tx, key lockstore.Key, owner string) error {
	if err := claimcheck.Owned(ctx, key, owner); err != nil {
		return err
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO claimbus_reservation (namespace, id, owner, confirmed, at) VALUES (?, ?, ?, 1, ?)`,
		key.Namespace, key.ID, owner, s.nowNanos()); err != nil {
		return fail("TxReserve", err)
	}
	return nil
}
