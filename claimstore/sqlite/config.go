package sqlite

import "time"

// Config configures a Store. The zero value is ready to use.
type Config struct {
	// Now is the store's clock, for reservation ages and outcome
	// retention (see docs/claimstore.md for why it is the
	// process's). Default: time.Now. Tests inject a clock they move by
	// hand.
	Now func() time.Time

	// NoAutoMigrate, when true, stops New from creating tables or applying
	// migrations: New checks that the database is at the version this
	// release needs and fails with an error matching ErrSchemaOutdated when
	// it is not (run Migrate, or goose on Migrations, first). Default false:
	// New applies pending migrations.
	NoAutoMigrate bool
}

func (c Config) withDefaults() Config {
	if c.Now == nil {
		c.Now = time.Now
	}
	return c
}
