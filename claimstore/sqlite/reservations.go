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

// reserveSQL writes a pending reservation unless the value is held by
// another (?1 namespace, ?2 id, ?3 owner, ?4 now, ?5 maxLag, in
// nanoseconds), in one statement: on conflict the row is rewritten only
// where it may be taken over, and kept as it is otherwise; either way the
// row as it stands is returned. (SQLite's SET expressions all read the
// row as it was.)
const reserveSQL = `INSERT INTO claimbus_reservation (namespace, id, owner, confirmed, at) VALUES (?1, ?2, ?3, 0, ?4)
	ON CONFLICT (namespace, id) DO UPDATE SET
		owner = CASE WHEN owner = excluded.owner OR (NOT confirmed AND excluded.at - at >= ?5) THEN excluded.owner ELSE owner END,
		confirmed = CASE WHEN owner = excluded.owner THEN confirmed WHEN NOT confirmed AND excluded.at - at >= ?5 THEN 0 ELSE confirmed END,
		at = CASE WHEN owner = excluded.owner OR (NOT confirmed AND excluded.at - at >= ?5) THEN excluded.at ELSE at END
	RETURNING owner, confirmed, at`

// Reserve implements claimstore.Reservations, in one statement.
func (s *Store) Reserve(ctx context.Context, key lockstore.Key, owner string, maxLag time.Duration) (claimstore.Reservation, bool, error) {
	if err := claimcheck.Reserve(ctx, key, owner, maxLag); err != nil {
		return claimstore.Reservation{}, false, err
	}
	held := claimstore.Reservation{Key: key}
	var at, now int64
	var before sql.NullString // the owner of the row before, if any
	err := s.write(ctx, func() error {
		now = s.nowNanos()
		err := s.db.QueryRowContext(ctx, `SELECT owner FROM claimbus_reservation WHERE namespace = ? AND id = ?`,
			key.Namespace, key.ID).Scan(&before)
		if err != nil && !errors.Is(err, sql.ErrNoRows) {
			return err
		}
		return s.db.QueryRowContext(ctx, reserveSQL, key.Namespace, key.ID, owner, now, int64(maxLag)).
			Scan(&held.Owner, &held.Confirmed, &at)
	})
	if err != nil {
		return claimstore.Reservation{}, false, fail("Reserve", err)
	}
	if held.Owner == owner {
		if before.Valid && before.String == owner {
			return claimstore.Reservation{Key: key, Owner: owner, Confirmed: held.Confirmed}, true, nil
		}
		return claimstore.Reservation{}, true, nil
	}
	held.Age = max(time.Duration(now-at), 0)
	return held, false, nil
}

// Confirm implements claimstore.Reservations.
func (s *Store) Confirm(ctx context.Context, key lockstore.Key, owner string) error {
	if err := claimcheck.Owned(ctx, key, owner); err != nil {
		return err
	}
	var n int64
	err := s.write(ctx, func() error {
		res, err := s.db.ExecContext(ctx, `UPDATE claimbus_reservation SET confirmed = 1, at = ?
			WHERE namespace = ? AND id = ? AND owner = ?`, s.nowNanos(), key.Namespace, key.ID, owner)
		if err == nil {
			n, err = res.RowsAffected()
		}
		return err
	})
	if err != nil {
		return fail("Confirm", err)
	}
	if n == 0 {
		return claimcheck.NotReserved(key, owner)
	}
	return nil
}

// Cancel implements claimstore.Reservations.
func (s *Store) Cancel(ctx context.Context, key lockstore.Key, owner string) error {
	if err := claimcheck.Owned(ctx, key, owner); err != nil {
		return err
	}
	return s.exec(ctx, "Cancel", `DELETE FROM claimbus_reservation
		WHERE namespace = ? AND id = ? AND owner = ? AND NOT confirmed`, key.Namespace, key.ID, owner)
}

// Drop implements claimstore.Reservations.
func (s *Store) Drop(ctx context.Context, key lockstore.Key) error {
	if err := claimcheck.Key(ctx, key); err != nil {
		return err
	}
	return s.exec(ctx, "Drop", `DELETE FROM claimbus_reservation WHERE namespace = ? AND id = ?`, key.Namespace, key.ID)
}

// exec runs a write statement of op.
func (s *Store) exec(ctx context.Context, op, q string, args ...any) error {
	err := s.write(ctx, func() error {
		_, err := s.db.ExecContext(ctx, q, args...)
		return err
	})
	if err != nil {
		return fail(op, err)
	}
	return nil
}

// List implements claimstore.Reservations.
func (s *Store) List(ctx context.Context, namespace, after string, limit int) ([]claimstore.Reservation, error) {
	if err := claimcheck.List(ctx, namespace, limit); err != nil {
		return nil, err
	}
	now := s.nowNanos()
	rows, err := s.db.QueryContext(ctx, `SELECT id, owner, confirmed, at FROM claimbus_reservation
		WHERE namespace = ? AND id > ? ORDER BY id LIMIT ?`, namespace, after, limit)
	if err != nil {
		return nil, fail("List", err)
	}
	defer func() { _ = rows.Close() }()
	var out []claimstore.Reservation
	for rows.Next() {
		r := claimstore.Reservation{Key: lockstore.Key{Namespace: namespace}}
		var at int64
		if err := rows.Scan(&r.Key.ID, &r.Owner, &r.Confirmed, &at); err != nil {
			return nil, fail("List", err)
		}
		r.Age = max(time.Duration(now-at), 0)
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, fail("List", err)
	}
	return out, nil
}
