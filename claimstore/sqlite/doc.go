// Package sqlite is the SQLite backend of claimstore: a Store whose
// reservations and outcomes live in two tables of a database file on one
// host, through modernc.org/sqlite (driver name "sqlite").
//
//	db, err := sql.Open("sqlite", locksqlite.DSN("app.db", 0)) // lockstore/sqlite
//	if err != nil {
//		return err
//	}
//	store, err := sqlite.New(ctx, db, sqlite.Config{})
//	if err != nil {
//		return err
//	}
//	held, reserved, err := store.Reserve(ctx, key, commandID, time.Minute)
//
// docs/claimstore.md#claimstoresqlite describes the tables, the clock and
// SQLITE_BUSY.
package sqlite
