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
// # Tables
//
// The database holds claimbus_reservation (namespace, id, owner,
// confirmed, at; keyed by namespace and id) and claimbus_outcome
// (namespace, id, fingerprint, result, err, expires; keyed by namespace
// and id, indexed by expires). Times are stored as Unix nanoseconds. IDs
// compare with SQLite's BINARY collation, so List pages in byte order.
//
// The tables are created by versioned migrations, goose files exported as
// Migrations (dialect sqlite3) and recorded in claimbus_claimstore_version
// (VersionTable); New applies the pending ones, or with
// Config.NoAutoMigrate fails with ErrSchemaOutdated until Migrate (or
// goose on Migrations) has run. The first migration adopts tables an
// earlier release created.
//
// # Clock
//
// Ages and expiries are computed by the store's clock, Config.Now (default
// time.Now), which the statements are given, not by SQLite's own: a SQLite
// database lives on one host, and SQLite's 'now' reads the same wall clock
// of that host as time.Now does, only at a millisecond, so there is one
// clock either way and this one counts nanoseconds. Every process using
// the file must keep the default (or a clock that agrees with it). Like
// any wall clock it can be stepped back: an age then reads as 0 until the
// clock passes the time written again.
//
// # Statements and SQLITE_BUSY
//
// Every call is one statement, run under the caller's ctx. Reserve writes
// and returns the holder in one statement (INSERT ... ON CONFLICT DO
// UPDATE with each column kept unless the value may be taken over,
// RETURNING the row). A store's write statements run one at a time,
// waiting in Go (bounded by their ctx) rather than in SQLite's busy
// handler; writers of other stores and processes are waited for by the
// connections' busy timeout, which New requires (lockstore/sqlite.DSN sets
// one). A statement that still finds the database locked fails with an
// error matching claimstore.ErrUnavailable, as does one that cannot open
// or read the file.
package sqlite
