package postgres

import (
	"context"
	"embed"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/claimbus/claimbus/internal/migrate"
)

//go:embed migrations/*.sql
var migrationFiles embed.FS

// Migrations are the store's schema migrations, goose files
// (github.com/pressly/goose/v3) at the root of the FS, for teams that run
// migrations with their own tool. They name no schema: run them with
// search_path set to Config.Schema (created beforehand), and record them in
// the version table VersionTable, as New and Migrate do. See
// docs/postgres-production.md, "Migrations".
var Migrations = migrations.FS

// VersionTable is the goose version table, in Config.Schema, that records
// which of Migrations are applied.
const VersionTable = "claimbus_lockstore_version"

var migrations = migrate.NewComponent("lockstore/postgres", migrationFiles, VersionTable, ErrSchemaOutdated)

// Migrate applies the pending Migrations to cfg.Schema in pool's database
// (on a connection of its own, opened with Config.LockConnString when it
// is set: a session advisory lock needs a session), creating the schema
// when missing, under the advisory lock New takes, and returns when the
// schema is at the version this release needs. It is what New does unless
// Config.NoAutoMigrate is set, for a deploy step to run before nodes that
// set it start.
func Migrate(ctx context.Context, pool *pgxpool.Pool, cfg Config) error {
	if pool == nil {
		return fmt.Errorf("postgres: Migrate: nil pool")
	}
	if err := cfg.validate(); err != nil {
		return err
	}
	cc := pool.Config().ConnConfig
	if cfg.LockConnString != "" {
		lc, err := pgx.ParseConfig(cfg.LockConnString)
		if err != nil { // Validate parsed it already
			return fmt.Errorf("postgres: Config.LockConnString: %s", redactParseError(err))
		}
		cc = lc
	}
	cfg = cfg.withDefaults(cc.RuntimeParams["application_name"])
	return migrations.MigratePostgresDB(ctx, cc, cfg.Schema)
}

// ensureSchema brings Config.Schema to the version this release needs, or with
// NoAutoMigrate checks that it is there. When it is (every New but the
// first on a database), that is one read on the pool.
func (s *Store) ensureSchema(ctx context.Context) error {
	if err := migrations.EnsurePostgres(ctx, s.pool, s.connConfig, s.cfg.Schema, s.cfg.NoAutoMigrate); err != nil {
		return fmt.Errorf("postgres: New: %w", err)
	}
	return nil
}
