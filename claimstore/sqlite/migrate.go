package sqlite

import (
	"context"
	"database/sql"
	"embed"

	"github.com/claimbus/claimbus/internal/migrate"
)

//go:embed migrations/*.sql
var migrationFiles embed.FS

// Migrations are the store's schema migrations, goose files
// (github.com/pressly/goose/v3, dialect sqlite3) at the root of the FS,
// for teams that run migrations with their own tool; record them in the
// version table VersionTable, as New and Migrate do. See
// docs/postgres-production.md, "Migrations".
var Migrations = migrations.FS

// VersionTable is the goose version table that records which of
// Migrations are applied.
const VersionTable = "claimbus_claimstore_version"

var migrations = migrate.NewComponent("claimstore/sqlite", migrationFiles, VersionTable, ErrSchemaOutdated)

// Migrate applies the pending Migrations to db's main database. It is what
// New does unless Config.NoAutoMigrate is set, for a deploy step to run
// before stores that set it open the database.
func Migrate(ctx context.Context, db *sql.DB) error { return migrations.MigrateSQLiteDB(ctx, db) }
