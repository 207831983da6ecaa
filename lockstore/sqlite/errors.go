package sqlite

import "errors"

var (
	// ErrFileLocked is returned by New when another Store, in this process
	// or another one, already holds the database file, under this name or
	// another (a hard link, a symlink, a bind mount): two stores with
	// separate in-process locks on one database would let two owners into
	// one key.
	ErrFileLocked = errors.New("sqlite: database file in use by another store")
	// ErrUnsuitableDB is returned by New for a *sql.DB the store cannot
	// guarantee anything on: an in-memory database (no file to lock),
	// transactions that do not begin IMMEDIATE, or no busy timeout. See
	// DSN for a connection string that suits.
	ErrUnsuitableDB = errors.New("sqlite: unsuitable database handle")
)

// ErrSchemaOutdated is what New returns (wrapped) when Config.NoAutoMigrate
// is set and the database is not at the migration version this release
// needs (the highest of Migrations); the message names the way to migrate it.
var ErrSchemaOutdated = errors.New("sqlite: the lock store's schema is not at the version this release needs")
