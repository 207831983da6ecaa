package sqlite

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"

	"github.com/claimbus/claimbus/internal/migrate"
)

//go:embed migrations/*.sql
var migrationFiles embed.FS

// Migrations are the store's schema migrations, goose files
// (github.com/pressly/goose/v3, dialect sqlite3) at the root of the FS,
// for teams that run migrations with their own tool; record them in the
// version table VersionTable, as New and Migrate do. See
// docs/postgres-production.md, "Migrations".
var Migrations = migrate.Sub(migrationFiles, "migrations")

// VersionTable is the goose version table that records which of
// Migrations are applied.
const VersionTable = "claimbus_lockstore_version"

// SchemaVersion is the migration version this release needs: the highest
// in Migrations.
var SchemaVersion = migrate.MustLatest(Migrations)

// Migrate applies the pending Migrations to db's main database. It is what
// New does unless Config.NoAutoMigrate is set, for a deploy step to run
// before stores that set it open the database.
func Migrate(ctx context.Context, db *sql.DB) error {
	if db == nil {
		return errors.New("sqlite: Migrate: nil *sql.DB")
	}
	if err := migrate.SQLite(ctx, db, VersionTable, Migrations); err != nil {
		return fmt.Errorf("sqlite: migrate: %w", err)
	}
	return nil
}

// ensureSchema brings db to SchemaVersion, or with noAuto checks that it is
// there. When it is (every New but the first on a file), that is two reads.
func ensureSchema(ctx context.Context, db *sql.DB, noAuto bool) error {
	v, err := migrate.SQLiteVersion(ctx, db, VersionTable)
	if err != nil {
		return fmt.Errorf("sqlite: New: read the schema version (%s): %w", VersionTable, err)
	}
	switch {
	case v >= SchemaVersion:
		return nil
	case noAuto:
		return fmt.Errorf("sqlite: New: %w: the database is at version %d, this release needs %d, and Config.NoAutoMigrate is set: "+
			"run lockstore/sqlite.Migrate, or goose (dialect sqlite3) up on its Migrations with table %s",
			ErrSchemaOutdated, v, SchemaVersion, VersionTable)
	}
	if err := Migrate(ctx, db); err != nil {
		return fmt.Errorf("sqlite: New: %w", err)
	}
	return nil
}
