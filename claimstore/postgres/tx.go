package postgres

import (
	"errors"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/claimbus/claimbus/claimstore"
	"github.com/claimbus/claimbus/claimstore/internal/claimcheck"
	"github.com/claimbus/claimbus/internal/claimtx"
	"github.com/claimbus/claimbus/lockstore"
)

func init() {
	claimtx.PostgresOf = func(store any) any { return batchStatements{store.(*Store)} }
}

// batchStatements are the statements of a Store that txcommand runs in the
// caller's transaction.
type batchStatements struct{ *Store }

func (s batchStatements) QueueOutcome(b *pgx.Batch, key lockstore.Key, o *claimstore.Outcome, found *bool) {
	b.Queue(`SELECT fingerprint, result, err FROM `+s.outcomes+`
		WHERE namespace = $1 AND id = $2 AND expires > now()`, key.Namespace, key.ID).QueryRow(func(row pgx.Row) error {
		err := row.Scan(&o.Fingerprint, &o.Result, &o.Err)
		*found = err == nil
		if errors.Is(err, pgx.ErrNoRows) {
			return nil
		}
		return err
	})
}

func (s batchStatements) QueueSaveOutcome(b *pgx.Batch, key lockstore.Key, o claimstore.Outcome, retention time.Duration) {
	b.Queue(`INSERT INTO `+s.outcomes+` AS t (namespace, id, fingerprint, result, err, expires)
		VALUES ($1, $2, $3, $4, $5, now() + interval '1 microsecond' * $6::int8)
		ON CONFLICT (namespace, id) DO UPDATE SET fingerprint = excluded.fingerprint, result = excluded.result,
			err = excluded.err, expires = excluded.expires`,
		key.Namespace, key.ID, o.Fingerprint, o.Result, o.Err, claimcheck.Micros(retention))
}

func (s batchStatements) QueueLookup(b *pgx.Batch, key lockstore.Key, lookup string, taken *bool, owner *string) {
	b.Queue(`SELECT EXISTS (`+lookup+`), (SELECT owner FROM `+s.reservations+` WHERE namespace = $2 AND id = $1)`,
		key.ID, key.Namespace).QueryRow(func(row pgx.Row) error {
		var o *string
		if err := row.Scan(taken, &o); err != nil {
			return err
		}
		if o != nil {
			*owner = *o
		}
		return nil
	})
}

func (s batchStatements) QueueReserve(b *pgx.Batch, key lockstore.Key, owner string) {
	b.Queue(`INSERT INTO `+s.reservations+` (namespace, id, owner, confirmed, at) VALUES ($1, $2, $3, true, now())`,
		key.Namespace, key.ID, owner)
}
