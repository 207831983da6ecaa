package migrate

import (
	"context"
	"database/sql"
	"fmt"
	"io/fs"
	"strings"

	"github.com/jackc/pgx/v5"
)

// Component is one package's migrations, and how New reports them.
type Component struct {
	// Package names the package in messages ("lockstore/postgres").
	Package string
	// FS holds the goose files, Table is the version table, Latest the
	// version the release needs.
	FS     fs.FS
	Table  string
	Latest int64
	// Outdated is the package's ErrSchemaOutdated.
	Outdated error
}

// NewComponent returns the Component of package pkg ("lockstore/sqlite")
// whose goose files are in the folder "migrations" of files, recorded in
// table; outdated is the package's ErrSchemaOutdated. Latest is the
// highest version of the files.
func NewComponent(pkg string, files fs.FS, table string, outdated error) Component {
	sub := Sub(files, "migrations")
	return Component{Package: pkg, FS: sub, Table: table, Latest: MustLatest(sub), Outdated: outdated}
}

// name is the package's own name, the prefix of its errors ("sqlite").
func (c Component) name() string {
	return c.Package[strings.LastIndexByte(c.Package, '/')+1:]
}

// MigrateSQLiteDB is the Migrate of a SQLite package: it applies the
// pending migrations to db's main database, its errors prefixed with the
// package's name.
func (c Component) MigrateSQLiteDB(ctx context.Context, db *sql.DB) error {
	if db == nil {
		return fmt.Errorf("%s: Migrate: nil *sql.DB", c.name())
	}
	if err := c.MigrateSQLite(ctx, db); err != nil {
		return fmt.Errorf("%s: %w", c.name(), err)
	}
	return nil
}

// MigratePostgresDB is the Migrate of a PostgreSQL package, once it has
// checked its pool and Config: MigratePostgres, its error prefixed with
// the package's name.
func (c Component) MigratePostgresDB(ctx context.Context, cc *pgx.ConnConfig, schema string) error {
	if err := c.MigratePostgres(ctx, cc, schema); err != nil {
		return fmt.Errorf("%s: %w", c.name(), err)
	}
	return nil
}

// EnsurePostgres brings schema to c.Latest (Postgres, on a connection
// opened with cc), or with noAuto checks that it is there and returns an
// error matching c.Outdated that names the ways to migrate it. When the
// schema is current it is one read on q.
func (c Component) EnsurePostgres(ctx context.Context, q Querier, cc *pgx.ConnConfig, schema string, noAuto bool) error {
	v, err := PostgresVersion(ctx, q, schema, c.Table)
	if err != nil {
		return fmt.Errorf("read the schema version (%s.%s): %w", schema, c.Table, err)
	}
	switch {
	case v >= c.Latest:
		return nil
	case noAuto:
		return fmt.Errorf("%w: schema %q is at version %d, this release needs %d, and Config.NoAutoMigrate is set: "+
			"run %s.Migrate, or goose up on its Migrations with table %s and search_path=%s",
			c.Outdated, schema, v, c.Latest, c.Package, c.Table, schema)
	}
	return c.MigratePostgres(ctx, cc, schema)
}

// MigratePostgres is Postgres for c, its error naming the schema.
func (c Component) MigratePostgres(ctx context.Context, cc *pgx.ConnConfig, schema string) error {
	if err := Postgres(ctx, cc, schema, c.Table, c.FS); err != nil {
		return fmt.Errorf("migrate schema %q: %w", schema, err)
	}
	return nil
}

// EnsureSQLite brings db to c.Latest (SQLite), or with noAuto checks that
// it is there and returns an error matching c.Outdated that names the ways
// to migrate it.
func (c Component) EnsureSQLite(ctx context.Context, db *sql.DB, noAuto bool) error {
	v, err := SQLiteVersion(ctx, db, c.Table)
	if err != nil {
		return fmt.Errorf("read the schema version (%s): %w", c.Table, err)
	}
	switch {
	case v >= c.Latest:
		return nil
	case noAuto:
		return fmt.Errorf("%w: the database is at version %d, this release needs %d, and Config.NoAutoMigrate is set: "+
			"run %s.Migrate, or goose (dialect sqlite3) up on its Migrations with table %s",
			c.Outdated, v, c.Latest, c.Package, c.Table)
	}
	return c.MigrateSQLite(ctx, db)
}

// MigrateSQLite is SQLite for c.
func (c Component) MigrateSQLite(ctx context.Context, db *sql.DB) error {
	if err := SQLite(ctx, db, c.Table, c.FS); err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	return nil
}
