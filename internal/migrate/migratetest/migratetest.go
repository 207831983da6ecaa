// Package migratetest holds the checks every migrated component's tests
// make (lockstore/postgres, claimstore/postgres and the two SQLite stores):
// which versions a version table records, and that a component's exported Migrations, applied
// with goose directly, give the schema its New expects. It is for tests only.
package migratetest

import (
	"context"
	"database/sql"
	"io/fs"
	"net/url"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"
	"github.com/stretchr/testify/require"

	"github.com/claimbus/claimbus/internal/migrate"
)

// Component is what the checks need of a migrated component: its exported
// migrations and its goose version table.
type Component struct {
	// Migrations are the component's exported goose files.
	Migrations fs.FS
	// VersionTable is the component's goose version table.
	VersionTable string
}

// Latest is the highest version of c.Migrations, the one its New needs.
func (c Component) Latest() int64 { return migrate.MustLatest(c.Migrations) }

// All is every version from 1 to c.Latest, as a fresh run records them.
func (c Component) All() []int64 {
	latest := c.Latest()
	vs := make([]int64, 0, latest)
	for v := int64(1); v <= latest; v++ {
		vs = append(vs, v)
	}
	return vs
}

// PostgresVersions lists the versions recorded in schema's version table of
// c, version 0 (goose's mark of a new table) left out, one entry per row.
func PostgresVersions(ctx context.Context, t testing.TB, pool *pgxpool.Pool, schema string, c Component) []int64 {
	t.Helper()
	rows, err := pool.Query(ctx, "SELECT version_id FROM "+pgx.Identifier{schema, c.VersionTable}.Sanitize()+
		" WHERE is_applied AND version_id > 0 ORDER BY id")
	require.NoError(t, err)
	versions, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	require.NoError(t, err)
	return versions
}

// SQLiteVersion is the highest version recorded in db's version table of
// c; it fails t if a version is recorded twice.
func SQLiteVersion(t testing.TB, db *sql.DB, c Component) int64 {
	t.Helper()
	var v, rows, distinct int64
	require.NoError(t, db.QueryRow("SELECT max(version_id), count(*), count(DISTINCT version_id) FROM "+c.VersionTable+
		" WHERE is_applied AND version_id > 0").Scan(&v, &rows, &distinct))
	require.Equal(t, distinct, rows, "a version recorded twice")
	return v
}

// RequireNoPostgresSchema fails t if schema exists on pool's database: a
// New with NoAutoMigrate creates nothing.
func RequireNoPostgresSchema(ctx context.Context, t testing.TB, pool *pgxpool.Pool, schema string) {
	t.Helper()
	var created bool
	require.NoError(t, pool.QueryRow(ctx, "SELECT to_regnamespace($1) IS NOT NULL", schema).Scan(&created))
	require.False(t, created, "NoAutoMigrate creates nothing")
}

// RequireNoSQLiteTables fails t if db has a table: a New with
// NoAutoMigrate creates nothing.
func RequireNoSQLiteTables(ctx context.Context, t testing.TB, db *sql.DB) {
	t.Helper()
	var tables int
	require.NoError(t, db.QueryRowContext(ctx, "SELECT count(*) FROM sqlite_schema WHERE type = 'table'").Scan(&tables))
	require.Zero(t, tables, "NoAutoMigrate creates nothing")
}

// GooseUpPostgres applies c's migrations with goose directly, as an
// operator who migrates out of band does (docs/postgres-production.md):
// it creates schema, connects to dsn with search_path set to it, and runs
// every migration, failing t unless all of them ran.
func GooseUpPostgres(ctx context.Context, t testing.TB, pool *pgxpool.Pool, dsn, schema string, c Component) {
	t.Helper()
	_, err := pool.Exec(ctx, "CREATE SCHEMA "+pgx.Identifier{schema}.Sanitize())
	require.NoError(t, err)
	u, err := url.Parse(dsn)
	require.NoError(t, err)
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	cc, err := pgx.ParseConfig(u.String())
	require.NoError(t, err)
	db := stdlib.OpenDB(*cc)
	defer func() { require.NoError(t, db.Close()) }()
	gooseUp(ctx, t, goose.DialectPostgres, db, c)
}

// GooseUpSQLite applies c's migrations to db with goose directly, failing
// t unless all of them ran.
func GooseUpSQLite(ctx context.Context, t testing.TB, db *sql.DB, c Component) {
	t.Helper()
	gooseUp(ctx, t, goose.DialectSQLite3, db, c)
}

func gooseUp(ctx context.Context, t testing.TB, dialect goose.Dialect, db *sql.DB, c Component) {
	t.Helper()
	p, err := goose.NewProvider(dialect, db, c.Migrations, goose.WithTableName(c.VersionTable))
	require.NoError(t, err)
	results, err := p.Up(ctx)
	require.NoError(t, err)
	require.Len(t, results, int(c.Latest()))
}
