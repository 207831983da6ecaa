package postgres

import (
	"errors"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/claimbus/claimbus/claimstore"
	"github.com/claimbus/claimbus/claimstore/internal/claimcheck"
	"github.com/claimbus/claimbus/lockstore"
)

// The Queue methods put the store's statements on a pgx.Batch that the
// caller sends in its own transaction (see lockstore/postgres.Begin), so
// that reservations and outcomes commit with the caller's writes, in the
// round trips it makes anyway. Their callbacks run when the batch's
// results are read.

// QueueOutcome queues the read of key's outcome whose retention has not
// passed into o, setting found when there is one.
func (s *Store) QueueOutcome(b *pgx.Batch, key lockstore.Key, o *claimstore.Outcome, found *bool) {
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

// QueueSaveOutcome queues the write of o under key for retention,
// replacing any outcome stored there.
func (s *Store) QueueSaveOutcome(b *pgx.Batch, key lockstore.Key, o claimstore.Outcome, retention time.Duration) {
	b.Queue(`INSERT INTO `+s.outcomes+` AS t (namespace, id, fingerprint, result, err, expires)
		VALUES ($1, $2, $3, $4, $5, now() + interval '1 microsecond' * $6::int8)
		ON CONFLICT (namespace, id) DO UPDATE SET fingerprint = excluded.fingerprint, result = excluded.result,
			err = excluded.err, expires = excluded.expires`,
		key.Namespace, key.ID, o.Fingerprint, o.Result, o.Err, claimcheck.Micros(retention))
}

// QueueLookup queues, as one statement, lookup (SQL given key.ID as $1,
// returning a row when the value is taken) into taken and the read of the
// owner of key's reservation into owner, left empty when it has none.
func (s *Store) QueueLookup(b *pgx.Batch, key lockstore.Key, lookup string, taken *bool, owner *string) {
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

// QueueReserve queues the insert of owner's confirmed reservation of key.
// The table's primary key is the guarantee: when the value is reserved
// already, the statement fails and so does the transaction.
func (s *Store) QueueReserve(b *pgx.Batch, key lockstore.Key, owner string) {
	b.Queue(`INSERT INTO `+s.reservations+` (namespace, id, owner, confirmed, at) VALUES ($1, $2, $3, true, now())`,
		key.Namespace, key.ID, owner)
}
