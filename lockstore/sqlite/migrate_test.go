package sqlite_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/claimbus/claimbus/internal/migrate/migratetest"
	"github.com/claimbus/claimbus/lockstore/sqlite"
)

var component = migratetest.Component{
	Migrations: sqlite.Migrations, VersionTable: sqlite.VersionTable,
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
	require.Equal(t, component.Latest(), migratetest.SQLiteVersion(t, db, component))
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
	migratetest.RequireNoSQLiteTables(ctx, t, db)
	migratetest.GooseUpSQLite(ctx, t, db, component)
	s := newStore(t, db, sqlite.Config{NoAutoMigrate: true})
	require.Positive(t, serializeToken(t, ctx, s, key("n")))

	fresh, _ := newDB(t)
	s2 := newStore(t, fresh, sqlite.Config{})
	require.Positive(t, serializeToken(t, ctx, s2, key("n")))
	require.Equal(t, component.Latest(), migratetest.SQLiteVersion(t, fresh, component))
}
