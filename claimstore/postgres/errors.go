package postgres

import "errors"

// ErrSchemaOutdated is what New returns (wrapped) when Config.NoAutoMigrate
// is set and Config.Schema is not at the migration version this release
// needs (the highest of Migrations); the message names the way to migrate it.
var ErrSchemaOutdated = errors.New("postgres: the claim store's schema is not at the version this release needs")
