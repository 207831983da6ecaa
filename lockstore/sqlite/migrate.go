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

var migrations = migrate.Component{
	Package: "lockstore/sqlite", FS: Migrations, Table: VersionTable, Latest: SchemaVersion, Outdated: ErrSchemaOutdated,
}

// Migrate applies the pending Migrations to db's main database. It is what
// New does unless Config.NoAutoMigrate is set, for a deploy step to run
// before stores that set it open the database.
func Migrate(ctx context.Context, db *sql.DB) error {
	if db == nil {
		return errors.New("sqlite: Migrate: nil *sql.DB")
	}
	if err := migrations.MigrateSQLite(ctx, db); err != nil {
		return fmt.Errorf("sqlite: %w", err)
	}
	return nil
}
