// Package sqlite is the embedded, single-node lock store of claimbus, on a
// SQLite database file through modernc.org/sqlite (pure Go, no cgo; the
// package registers its driver as "sqlite").
//
// Its locks are the memory store's, held by the process; one Store serves a
// database file, and a second process on the same file is refused. Serialize
// runs a function in a BEGIN IMMEDIATE transaction while holding a key's
// lock, and Exclusive a section that one holder at a time runs.
//
// docs/lockstore.md#lockstoresqlite describes the store, its file,
// Serialize and Exclusive, and the migrations.
package sqlite
