package postgres

import (
	"cmp"
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"
)

// Defaults and bounds of Config.
const (
	// defaultSchema is the default of Config.Schema: the schema
	// lockstore/postgres uses too.
	defaultSchema = "claimbus"
	// defaultMaxBatch is the default of Config.MaxBatch.
	defaultMaxBatch = 256
	// maxBatchLimit bounds Config.MaxBatch.
	maxBatchLimit = 4096
	// defaultBatchLanes is the default of Config.BatchLanes.
	defaultBatchLanes = 1
	// maxBatchLanes bounds Config.BatchLanes.
	maxBatchLanes = 64

	// maxIdentifierLen is PostgreSQL's NAMEDATALEN - 1.
	maxIdentifierLen = 63
)

// Config configures a Store. The zero value is ready to use.
type Config struct {
	// Schema is the schema of the tables claim_reservation and
	// claim_outcome and of the migrations' version table
	// (claimbus_claimstore_version), which New creates or brings up to date
	// (see Migrations) unless NoAutoMigrate is set. Default "claimbus".
	Schema string

	// NoAutoMigrate, when true, stops New from creating the schema or
	// applying migrations: New checks that Schema is at the version this
	// release needs and fails with an error matching ErrSchemaOutdated when
	// it is not. Set it when the schema is migrated by a deploy step (Migrate,
	// or goose on Migrations) and the nodes' role may not create tables.
	// Default false: New applies pending migrations, under an advisory lock,
	// so nodes starting together take turns.
	NoAutoMigrate bool

	// MaxBatch is the most calls of Reserve, Confirm or Cancel that one
	// statement carries (calls that arrive while a statement runs wait and
	// go together in the next one). Default 256, at most 4096.
	MaxBatch int

	// BatchLanes is how many statements of one method (Reserve, Confirm,
	// Cancel) run at once, each on a pooled connection; the calls that
	// arrive while every lane runs wait for the next free one, in batches.
	// More lanes cut the wait behind a slow statement, fewer make larger
	// batches and less work for the server. Default 1, at most 64.
	BatchLanes int
}

// validate reports every problem of c at once, joined with errors.Join.
func (c Config) validate() error {
	var errs []error
	if len(c.Schema) > maxIdentifierLen || !utf8.ValidString(c.Schema) || strings.IndexByte(c.Schema, 0) >= 0 {
		errs = append(errs, fmt.Errorf("postgres: Config.Schema %.70q is not a valid identifier (at most %d bytes of UTF-8, no NUL)", c.Schema, maxIdentifierLen))
	}
	if c.MaxBatch < 0 || c.MaxBatch > maxBatchLimit {
		errs = append(errs, fmt.Errorf("postgres: Config.MaxBatch is %d, want 0 (default %d) to %d", c.MaxBatch, defaultMaxBatch, maxBatchLimit))
	}
	if c.BatchLanes < 0 || c.BatchLanes > maxBatchLanes {
		errs = append(errs, fmt.Errorf("postgres: Config.BatchLanes is %d, want 0 (default %d) to %d", c.BatchLanes, defaultBatchLanes, maxBatchLanes))
	}
	return errors.Join(errs...)
}

// withDefaults fills the zero fields of a valid c.
func (c Config) withDefaults() Config {
	c.Schema = cmp.Or(c.Schema, defaultSchema)
	c.MaxBatch = cmp.Or(c.MaxBatch, defaultMaxBatch)
	c.BatchLanes = cmp.Or(c.BatchLanes, defaultBatchLanes)
	return c
}
