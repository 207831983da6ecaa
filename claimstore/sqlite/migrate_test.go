package sqlite_test

import (
	"context"
	"database/sql"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/claimbus/claimbus/claimstore/sqlite"
	"github.com/claimbus/claimbus/internal/migrate/migratetest"
	"github.com/claimbus/claimbus/lockstore"
)

// release0 is the schema the release before versioned migrations created
// at New, statement for statement.
var release0 = []string{
	`CREATE TABLE IF NOT EXISTS claimbus_reservation (
		namespace TEXT NOT NULL,
		id TEXT NOT NULL,
		owner TEXT NOT NULL,
		confirmed INTEGER NOT NULL,
		at INTEGER NOT NULL,
		PRIMARY KEY (namespace, id)) WITHOUT ROWID`,
	`CREATE TABLE IF NOT EXISTS claimbus_outcome (
		namespace TEXT NOT NULL,
		id TEXT NOT NULL,
		fingerprint BLOB,
		result BLOB,
		err BLOB,
		expires INTEGER NOT NULL,
		PRIMARY KEY (namespace, id)) WITHOUT ROWID`,
	`CREATE INDEX IF NOT EXISTS claimbus_outcome_expires ON claimbus_outcome (expires)`,
}

func migrateCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

var component = migratetest.Component{
	Migrations: sqlite.Migrations, VersionTable: sqlite.VersionTable,
}

// TestMigrateUpgradesRelease0: tables the earlier release created, with a
// reservation in them, are adopted by the first migration.
func TestMigrateUpgradesRelease0(t *testing.T) {
	t.Parallel()
	ctx := migrateCtx(t)
	db := openDB(t, testDSN(t))
	for _, q := range release0 {
		_, err := db.ExecContext(ctx, q)
		require.NoError(t, err)
	}
	_, err := db.ExecContext(ctx, "INSERT INTO claimbus_reservation VALUES ('ns', 'held', 'old-owner', 0, ?)", time.Now().UnixNano())
	require.NoError(t, err)

	s := newStore(t, db, sqlite.Config{})
	require.Equal(t, component.Latest(), migratetest.SQLiteVersion(t, db, component))
	held, reserved, err := s.Reserve(ctx, lockstore.Key{Namespace: "ns", ID: "held"}, "new-owner", time.Hour)
	require.NoError(t, err)
	require.False(t, reserved, "the old reservation survives")
	require.Equal(t, "old-owner", held.Owner)
}

// TestMigrateStoresStartingTogether: stores opening one fresh file at once
// (each with a handle of its own) all succeed, and the migrations ran once.
func TestMigrateStoresStartingTogether(t *testing.T) {
	t.Parallel()
	dsn := testDSN(t)
	const stores = 4
	dbs := make([]*sql.DB, stores)
	for i := range dbs {
		dbs[i] = openDB(t, dsn)
		// Each handle's first connection switches the fresh file to WAL
		// (the DSN's _journal_mode), one after the other: connections
		// racing to make that switch can get SQLITE_BUSY from SQLite
		// without their busy handler being called (about 1 run in 20 here
		// failed so, in the driver's connection set-up, before New). What
		// races below is New and its migrations, on a file with no tables.
		require.NoError(t, dbs[i].PingContext(migrateCtx(t)))
	}
	errs := make([]error, stores)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range stores {
		wg.Go(func() {
			<-start
			_, errs[i] = sqlite.New(migrateCtx(t), dbs[i], sqlite.Config{})
		})
	}
	close(start)
	wg.Wait()
	for i, err := range errs {
		require.NoError(t, err, "store %d", i)
	}
	require.Equal(t, component.Latest(), migratetest.SQLiteVersion(t, dbs[0], component))
}

// TestNoAutoMigrate: with NoAutoMigrate, New on an empty file creates
// nothing and fails with ErrSchemaOutdated; once the exported Migrations
// are applied with goose directly, it succeeds.
func TestNoAutoMigrate(t *testing.T) {
	t.Parallel()
	ctx := migrateCtx(t)
	db := openDB(t, testDSN(t))
	_, err := sqlite.New(ctx, db, sqlite.Config{NoAutoMigrate: true})
	require.ErrorIs(t, err, sqlite.ErrSchemaOutdated)
	require.ErrorContains(t, err, "Migrate")
	migratetest.RequireNoSQLiteTables(ctx, t, db)
	migratetest.GooseUpSQLite(ctx, t, db, component)
	s := newStore(t, db, sqlite.Config{NoAutoMigrate: true})
	_, reserved, err := s.Reserve(ctx, lockstore.Key{Namespace: "ns", ID: "1"}, "me", time.Hour)
	require.NoError(t, err)
	require.True(t, reserved)
}
