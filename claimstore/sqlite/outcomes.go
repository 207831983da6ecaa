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

// outcomeSQL reads the outcome of a key (namespace, id) whose retention
// has not passed (now).
const outcomeSQL = `SELECT fingerprint, result, err FROM claimbus_outcome
	WHERE namespace = ? AND id = ? AND expires > ?`

// saveOutcomeSQL writes the outcome of a key (namespace, id, fingerprint,
// result, err, expires), replacing any outcome stored there.
const saveOutcomeSQL = `INSERT INTO claimbus_outcome (namespace, id, fingerprint, result, err, expires)
	VALUES (?, ?, ?, ?, ?, ?)
	ON CONFLICT (namespace, id) DO UPDATE SET fingerprint = excluded.fingerprint, result = excluded.result,
		err = excluded.err, expires = excluded.expires`

// Outcome implements claimstore.Outcomes.
func (s *Store) Outcome(ctx context.Context, key lockstore.Key) (claimstore.Outcome, bool, error) {
	return s.outcome(ctx, s.db, key)
}

// outcome reads key's outcome with q.
func (s *Store) outcome(ctx context.Context, q interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}, key lockstore.Key) (claimstore.Outcome, bool, error) {
	if err := claimcheck.Key(ctx, key); err != nil {
		return claimstore.Outcome{}, false, err
	}
	var o claimstore.Outcome
	err := q.QueryRowContext(ctx, outcomeSQL, key.Namespace, key.ID, s.nowNanos()).Scan(&o.Fingerprint, &o.Result, &o.Err)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return claimstore.Outcome{}, false, nil
	case err != nil:
		return claimstore.Outcome{}, false, fail("Outcome", err)
	}
	return o, true, nil
}

// SaveOutcome implements claimstore.Outcomes.
func (s *Store) SaveOutcome(ctx context.Context, key lockstore.Key, o claimstore.Outcome, retention time.Duration) error {
	if err := claimcheck.Save(ctx, key, retention); err != nil {
		return err
	}
	return s.exec(ctx, "SaveOutcome", saveOutcomeSQL,
		key.Namespace, key.ID, o.Fingerprint, o.Result, o.Err, after(s.nowNanos(), retention))
}

// PurgeOutcomes implements claimstore.Outcomes.
func (s *Store) PurgeOutcomes(ctx context.Context, limit int) (int, error) {
	if err := claimcheck.Purge(ctx, limit); err != nil {
		return 0, err
	}
	var n int64
	err := s.write(ctx, func() error {
		res, err := s.db.ExecContext(ctx, `DELETE FROM claimbus_outcome WHERE (namespace, id) IN (
			SELECT namespace, id FROM claimbus_outcome WHERE expires <= ?1 ORDER BY expires LIMIT ?2)`, s.nowNanos(), limit)
		if err == nil {
			n, err = res.RowsAffected()
		}
		return err
	})
	if err != nil {
		return 0, fail("PurgeOutcomes", err)
	}
	return int(n), nil
}
