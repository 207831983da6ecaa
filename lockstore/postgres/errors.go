package postgres

import "errors"

// ErrNoSession is what New returns (wrapped) when its lock connections do
// not each keep one server session: a pooler in transaction or statement
// mode (PgBouncer's pool_mode = transaction or statement) hands each
// statement or transaction to whichever server connection is free, so a
// session advisory lock taken on one statement may belong to another
// client's connection on the next. A lock connection that finds the same
// at a reconnect stays down with this error (and keeps retrying). See
// Config.LockConnString and docs/postgres-production.md.
var ErrNoSession = errors.New("postgres: the lock connections go through a pooler in transaction or statement mode (PgBouncer?): " +
	"session advisory locks need a session: give Config.LockConnString a connection string straight to the server (or a session-mode pool)")

// ErrSchemaOutdated is what New returns (wrapped) when Config.NoAutoMigrate
// is set and Config.Schema is not at the migration version this release
// needs (the highest of Migrations); the message names the way to migrate it.
var ErrSchemaOutdated = errors.New("postgres: the lock store's schema is not at the version this release needs")
