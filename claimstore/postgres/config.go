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
	// DefaultSchema is the default of Config.Schema: the schema
	// lockstore/postgres uses too.
	DefaultSchema = "claimbus"
	// DefaultMaxBatch is the default of Config.MaxBatch.
	DefaultMaxBatch = 256
	// MaxBatchLimit bounds Config.MaxBatch.
	MaxBatchLimit = 4096

	// maxIdentifierLen is PostgreSQL's NAMEDATALEN - 1.
	maxIdentifierLen = 63
)

// Config configures a Store. The zero value is ready to use.
type Config struct {
	// Schema is the schema of the tables claim_reservation and
	// claim_outcome, which New creates when they are missing. Default
	// "claimbus".
	Schema string

	// MaxBatch is the most calls of Reserve, Confirm or Cancel that one
	// statement carries (calls that arrive while a statement runs wait and
	// go together in the next one). Default 256, at most 4096.
	MaxBatch int
}

// Validate reports every problem of c at once, joined with errors.Join.
func (c Config) Validate() error {
	var errs []error
	if len(c.Schema) > maxIdentifierLen || !utf8.ValidString(c.Schema) || strings.IndexByte(c.Schema, 0) >= 0 {
		errs = append(errs, fmt.Errorf("postgres: Config.Schema %.70q is not a valid identifier (at most %d bytes of UTF-8, no NUL)", c.Schema, maxIdentifierLen))
	}
	if c.MaxBatch < 0 || c.MaxBatch > MaxBatchLimit {
		errs = append(errs, fmt.Errorf("postgres: Config.MaxBatch is %d, want 0 (default %d) to %d", c.MaxBatch, DefaultMaxBatch, MaxBatchLimit))
	}
	return errors.Join(errs...)
}

// withDefaults fills the zero fields of a valid c.
func (c Config) withDefaults() Config {
	c.Schema = cmp.Or(c.Schema, DefaultSchema)
	c.MaxBatch = cmp.Or(c.MaxBatch, DefaultMaxBatch)
	return c
}
