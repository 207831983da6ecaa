package app

import (
	"context"
	"fmt"
	"strings"

	"github.com/claimbus/claimbus/lockstore"
)

// schemaVersion names the schema below; it is the id of the advisory lock
// that nodes starting at once take turns on.
const schemaVersion = "v1"

// namespaceSchema is the lock namespace of schema creation.
const namespaceSchema = "example.schema"

// schema is the example's tables. SQLite and PostgreSQL read them alike.
// The unique indexes are the backstop under the claims and locks: the
// claims make them never fire, and they catch whatever bypasses the bus.
var schema = []string{
	`CREATE TABLE IF NOT EXISTS staff (
	staff_id TEXT PRIMARY KEY,
	email    TEXT NOT NULL,
	name     TEXT NOT NULL
)`,
	// One member of staff per email, stored normalised (lower case).
	`CREATE UNIQUE INDEX IF NOT EXISTS staff_email_key ON staff (email)`,

	// The events staff model's append-only log of StaffRegistered: no
	// unique index on email (the staff table, its read model, has it).
	`CREATE TABLE IF NOT EXISTS staff_event (
	event_id    TEXT PRIMARY KEY,
	staff_id    TEXT NOT NULL,
	email       TEXT NOT NULL,
	name        TEXT NOT NULL,
	command_id  TEXT NOT NULL,
	recorded_at BIGINT NOT NULL
)`,
	`CREATE INDEX IF NOT EXISTS staff_event_email ON staff_event (email)`,
	`CREATE INDEX IF NOT EXISTS staff_event_staff_id ON staff_event (staff_id)`,
	// The order in which a starting node's catch-up reads the events.
	`CREATE INDEX IF NOT EXISTS staff_event_order ON staff_event (recorded_at, event_id)`,

	`CREATE TABLE IF NOT EXISTS wallet (
	wallet_id TEXT PRIMARY KEY,
	currency  TEXT NOT NULL,
	balance   BIGINT NOT NULL CHECK (balance >= 0)
)`,
	`CREATE TABLE IF NOT EXISTS transfer (
	transfer_id    TEXT PRIMARY KEY,
	from_wallet_id TEXT NOT NULL REFERENCES wallet (wallet_id),
	to_wallet_id   TEXT NOT NULL REFERENCES wallet (wallet_id),
	amount         BIGINT NOT NULL CHECK (amount > 0),
	currency       TEXT NOT NULL,
	state          TEXT NOT NULL CHECK (state IN ('open', 'approved', 'cancelled')),
	reason         TEXT NOT NULL DEFAULT ''
)`,

	`CREATE TABLE IF NOT EXISTS lobby (
	lobby_id   TEXT PRIMARY KEY,
	words_left INTEGER NOT NULL CHECK (words_left >= 0)
)`,
	`CREATE TABLE IF NOT EXISTS lobby_word (
	lobby_id TEXT NOT NULL REFERENCES lobby (lobby_id),
	word     TEXT NOT NULL,
	PRIMARY KEY (lobby_id, word)
)`,
	// One winner per word of a lobby.
	`CREATE TABLE IF NOT EXISTS lobby_win (
	lobby_id   TEXT NOT NULL,
	word       TEXT NOT NULL,
	command_id TEXT NOT NULL,
	PRIMARY KEY (lobby_id, word),
	FOREIGN KEY (lobby_id, word) REFERENCES lobby_word (lobby_id, word)
)`,
}

// Migrate creates the example's tables in b's database when they are
// missing. Several nodes may run it at once: CREATE ... IF NOT EXISTS is
// not safe when two sessions run it together (both may insert the same
// catalog row), so the statements run in Serialize on the schema's key,
// one node at a time.
func Migrate(ctx context.Context, b Backend) error {
	if b == nil {
		return fmt.Errorf("app: Migrate: nil Backend")
	}
	err := b.serialize(ctx, lockstore.Key{Namespace: namespaceSchema, ID: schemaVersion}, func(ctx context.Context, q querier) error {
		for _, s := range schema {
			if _, err := q.exec(ctx, s); err != nil {
				return fmt.Errorf("%s: %w", firstLine(s), err)
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("app: create the schema: %w", err)
	}
	return nil
}

// firstLine returns the first line of a statement, for error messages.
func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return strings.TrimSuffix(line, " (")
}
