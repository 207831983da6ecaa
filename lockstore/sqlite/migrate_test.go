package sqlite_test

import (
	"database/sql"
	"testing"

	"github.com/pressly/goose/v3"
	"github.com/stretchr/testify/require"

	"github.com/claimbus/claimbus/internal/migrate"
	"github.com/claimbus/claimbus/lockstore/sqlite"
)

// appliedVersion is the highest version recorded in db's version table;
// each is recorded once.
func appliedVersion(t *testing.T, db *sql.DB) int64 {
	t.Helper()
	var v, rows, distinct int64
	require.NoError(t, db.QueryRow("SELECT max(version_id), count(*), count(DISTINCT version_id) FROM "+sqlite.VersionTable+
		" WHERE is_applied AND version_id > 0").Scan(&v, &rows, &distinct))
	require.Equal(t, distinct, rows, "a version recorded twice")
	return v
}

func TestSchemaVersionIsTheLatestMigration(t *testing.T) {
	t.Parallel()
	v, err := migrate.Latest(sqlite.Migrations)
	require.NoError(t, err)
	require.Equal(t, v, sqlite.SchemaVersion)
	require.Positive(t, sqlite.SchemaVersion)
}

// TestMigrateUpgradesRelease0: a file the release before versioned
// migrations wrote (the token table, with a high-water mark) is adopted by
// the first migration: New records the version and tokens rise past the
// mark.
func TestMigrateUpgradesRelease0(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	db, _ := newDB(t)
	// release 0's statement, then a mark left by its last run.
	_, err := db.ExecContext(ctx, "CREATE TABLE IF NOT EXISTS claimbus_token (id INTEGER PRIMARY KEY CHECK (id = 1), next INTEGER NOT NULL)")
	require.NoError(t, err)
	const mark = int64(3) << 32
	_, err = db.ExecContext(ctx, "INSERT INTO claimbus_token (id, next) VALUES (1, ?)", mark)
	require.NoError(t, err)

	s := newStore(t, db, sqlite.Config{})
	require.GreaterOrEqual(t, serializeToken(t, ctx, s, key("m")), mark)
	require.Equal(t, sqlite.SchemaVersion, appliedVersion(t, db))
}

// TestNoAutoMigrate: with NoAutoMigrate, New on an empty file creates
// nothing and fails with ErrSchemaOutdated; once the exported Migrations
// are applied with goose directly, it succeeds, as it does on a fresh file
// without NoAutoMigrate.
func TestNoAutoMigrate(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	db, _ := newDB(t)
	_, err := sqlite.New(ctx, db, sqlite.Config{NoAutoMigrate: true})
	require.ErrorIs(t, err, sqlite.ErrSchemaOutdated)
	require.ErrorContains(t, err, "Migrate")
	var tables int
	require.NoError(t, db.QueryRowContext(ctx, "SELECT count(*) FROM sqlite_schema WHERE type = 'table'").Scan(&tables))
	require.Zero(t, tables, "NoAutoMigrate creates nothing")

	p, err := goose.NewProvider(goose.DialectSQLite3, db, sqlite.Migrations, goose.WithTableName(sqlite.VersionTable))
	require.NoError(t, err)
	results, err := p.Up(ctx)
	require.NoError(t, err)
	require.Len(t, results, int(sqlite.SchemaVersion))
	s := newStore(t, db, sqlite.Config{NoAutoMigrate: true})
	require.Positive(t, serializeToken(t, ctx, s, key("n")))

	fresh, _ := newDB(t)
	s2 := newStore(t, fresh, sqlite.Config{})
	require.Positive(t, serializeToken(t, ctx, s2, key("n")))
	require.Equal(t, sqlite.SchemaVersion, appliedVersion(t, fresh))
}
