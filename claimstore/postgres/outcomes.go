package postgres

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/claimbus/claimbus/claimstore"
	"github.com/claimbus/claimbus/claimstore/internal/claimcheck"
	"github.com/claimbus/claimbus/lockstore"
)

// Outcome implements claimstore.Outcomes.
func (s *Store) Outcome(ctx context.Context, key lockstore.Key) (claimstore.Outcome, bool, error) {
	if err := claimcheck.Key(ctx, key); err != nil {
		return claimstore.Outcome{}, false, err
	}
	var o claimstore.Outcome
	err := s.pool.QueryRow(ctx, `SELECT fingerprint, result, err FROM `+s.outcomes+`
		WHERE namespace = $1 AND id = $2 AND expires > now()`, key.Namespace, key.ID).Scan(&o.Fingerprint, &o.Result, &o.Err)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return claimstore.Outcome{}, false, nil
	case err != nil:
		return claimstore.Outcome{}, false, s.fail(ctx, "Outcome", err)
	}
	return o, true, nil
}

// SaveOutcome implements claimstore.Outcomes. The retention counts from
// the server's clock, in whole microseconds (rounded up).
func (s *Store) SaveOutcome(ctx context.Context, key lockstore.Key, o claimstore.Outcome, retention time.Duration) error {
	if err := claimcheck.Save(ctx, key, retention); err != nil {
		return err
	}
	_, err := s.pool.Exec(ctx, `INSERT INTO `+s.outcomes+` AS t (namespace, id, fingerprint, result, err, expires)
		VALUES ($1, $2, $3, $4, $5, now() + interval '1 microsecond' * $6::int8)
		ON CONFLICT (namespace, id) DO UPDATE SET fingerprint = excluded.fingerprint, result = excluded.result,
			err = excluded.err, expires = excluded.expires`,
		key.Namespace, key.ID, o.Fingerprint, o.Result, o.Err, claimcheck.Micros(retention))
	if err != nil {
		return s.fail(ctx, "SaveOutcome", err)
	}
	return nil
}

// PurgeOutcomes implements claimstore.Outcomes. Outcomes another purge
// is deleting at the same time are skipped, not waited for.
func (s *Store) PurgeOutcomes(ctx context.Context, limit int) (int, error) {
	if err := claimcheck.Purge(ctx, limit); err != nil {
		return 0, err
	}
	tag, err := s.pool.Exec(ctx, `DELETE FROM `+s.outcomes+` WHERE (namespace, id) IN (
		SELECT namespace, id FROM `+s.outcomes+` WHERE expires <= now() ORDER BY expires LIMIT $1 FOR UPDATE SKIP LOCKED)
		AND expires <= now()`, limit)
	if err != nil {
		return 0, s.fail(ctx, "PurgeOutcomes", err)
	}
	return int(tag.RowsAffected()), nil
}
