package sqlite

import "errors"

// ErrUnsuitableDB is returned by New for a *sql.DB the store cannot work
// on: not modernc.org/sqlite's driver, or connections without a busy
// timeout (whose writes fail at once while another connection writes).
// lockstore/sqlite.DSN returns a connection string that suits.
var ErrUnsuitableDB = errors.New("sqlite: unsuitable database handle")

// ErrSchemaOutdated is what New returns (wrapped) when Config.NoAutoMigrate
// is set and the database is not at the migration version this release
// needs (the highest of Migrations); the message names the way to migrate it.
var ErrSchemaOutdated = errors.New("sqlite: the claim store's schema is not at the version this release needs")
