// Package claimtx hands txcommand the statements of the claim stores that
// run in the caller's transaction, so that reservations and outcomes
// commit with the caller's writes, without making them part of the
// stores' API. Each store package sets its function in an init.
package claimtx

import (
	"context"
	"database/sql"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/claimbus/claimbus/claimstore"
	"github.com/claimbus/claimbus/lockstore"
)

// Postgres queues a claimstore/postgres Store's statements on a batch that
// the caller sends in its own transaction. Their callbacks run when the
// batch's results are read.
type Postgres interface {
	// QueueOutcome queues the read of key's outcome whose retention has
	// not passed into o, setting found when there is one.
	QueueOutcome(b *pgx.Batch, key lockstore.Key, o *claimstore.Outcome, found *bool)
	// QueueSaveOutcome queues the write of o under key for retention,
	// replacing any outcome stored there.
	QueueSaveOutcome(b *pgx.Batch, key lockstore.Key, o claimstore.Outcome, retention time.Duration)
	// QueueLookup queues, as one statement, lookup (SQL given key.ID as
	// $1, returning a row when the value is taken) into taken and the read
	// of the owner of key's reservation into owner, left empty when it has
	// none.
	QueueLookup(b *pgx.Batch, key lockstore.Key, lookup string, taken *bool, owner *string)
	// QueueReserve queues the insert of owner's confirmed reservation of
	// key. The table's primary key is the guarantee: when the value is
	// reserved already, the statement fails and so does the transaction.
	QueueReserve(b *pgx.Batch, key lockstore.Key, owner string)
}

// SQLite runs a claimstore/sqlite Store's statements in tx, a transaction
// of the caller on the store's database. They bypass the store's write
// gate: tx holds SQLite's write lock already.
type SQLite interface {
	// Outcome reads key's outcome whose retention has not passed.
	Outcome(ctx context.Context, tx *sql.Tx, key lockstore.Key) (claimstore.Outcome, bool, error)
	// SaveOutcome writes o under key for retention, replacing any outcome
	// stored there.
	SaveOutcome(ctx context.Context, tx *sql.Tx, key lockstore.Key, o claimstore.Outcome, retention time.Duration) error
	// Lookup runs lookup (SQL given key.ID as $1, returning a row when the
	// value is taken) into taken, and reads the owner of key's
	// reservation, empty when it has none.
	Lookup(ctx context.Context, tx *sql.Tx, key lockstore.Key, lookup string) (taken bool, owner string, err error)
	// Reserve inserts owner's confirmed reservation of key. When the
	// value is reserved already, the statement fails.
	Reserve(ctx context.Context, tx *sql.Tx, key lockstore.Key, owner string) error
}

// PostgresOf returns the statements of a *claimstore/postgres.Store, and
// SQLiteOf those of a *claimstore/sqlite.Store; each is set by its store's
// package, which every caller imports to have a store.
var (
	PostgresOf func(store any) Postgres
	SQLiteOf   func(store any) SQLite
)
