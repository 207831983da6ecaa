package migrate

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/pressly/goose/v3/database"
	"github.com/pressly/goose/v3/lock"
)

// lockKey is the bigint advisory lock every migration run on PostgreSQL
// holds, whichever component it migrates (lockstore/postgres,
// claimstore/postgres): nodes starting at once take turns rather than race
// on CREATE ... (which can fail with a unique violation when two sessions
// run it together), and the two components never create one schema at
// once. The bigint form has a key space of its own, apart from the two-int
// lock ids of lockstore/postgres.
const lockKey int64 = 0x636c61696d627573 // "claimbus"

// pgLocker is a goose session locker on a bigint session advisory lock,
// taken with pg_advisory_lock: a run waits in the server for the one before
// it (no polling, unlike goose's own, which tries every second or more),
// bounded by its context.
type pgLocker struct{ key int64 }

var _ lock.SessionLocker = pgLocker{}

// SessionLock takes the lock on conn.
func (l pgLocker) SessionLock(ctx context.Context, conn *sql.Conn) error {
	if _, err := conn.ExecContext(ctx, "SELECT pg_advisory_lock($1::int8)", l.key); err != nil {
		return fmt.Errorf("take the migration lock: %w", err)
	}
	return nil
}

// SessionUnlock releases the lock.
func (l pgLocker) SessionUnlock(ctx context.Context, conn *sql.Conn) error {
	_, err := conn.ExecContext(ctx, "SELECT pg_advisory_unlock($1::int8)", l.key)
	return err
}

// pgPrepare creates the schema and goose's version table in it (with
// goose's own statements) when either is missing, in one transaction
// holding the advisory lock key. goose creates its version table before it
// takes its session lock (Provider.Up asks HasPending first), in a schema
// that must exist; without this, nodes starting together on a fresh
// database would race to create it, and all but one retry a second later.
func pgPrepare(ctx context.Context, db *sql.DB, schema, table string, key int64) error {
	store, err := database.NewStore(database.DialectPostgres, table)
	if err != nil {
		return err
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback() }()
	if _, err := tx.ExecContext(ctx, "SELECT pg_advisory_xact_lock($1::int8)", key); err != nil {
		return fmt.Errorf("take the migration lock: %w", err)
	}
	var schemaExists, tableExists bool
	err = tx.QueryRowContext(ctx, "SELECT to_regnamespace($1) IS NOT NULL, to_regclass($2) IS NOT NULL",
		pgx.Identifier{schema}.Sanitize(), pgx.Identifier{schema, table}.Sanitize()).Scan(&schemaExists, &tableExists)
	if err != nil {
		return err
	}
	if !schemaExists {
		if _, err := tx.ExecContext(ctx, "CREATE SCHEMA "+pgx.Identifier{schema}.Sanitize()); err != nil {
			return fmt.Errorf("create schema %q: %w", schema, err)
		}
	}
	if !tableExists {
		if err := store.CreateVersionTable(ctx, tx); err != nil {
			return err
		}
		// goose marks a version table it creates with version 0.
		if err := store.Insert(ctx, tx, database.InsertRequest{Version: 0}); err != nil {
			return err
		}
	}
	return tx.Commit()
}
