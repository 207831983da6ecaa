package sqltransport

import (
	"context"
	"fmt"
	"hash/fnv"

	wsql "github.com/ThreeDotsLabs/watermill-sql/v4/pkg/sql"
	"github.com/jackc/pgx/v5"

	"github.com/claimbus/claimbus/bus"
)

// maxIdentifier is PostgreSQL's longest identifier, in bytes.
const maxIdentifier = 63

// tableName returns the unquoted name of topic's table: the prefix and the
// topic, or, when that is too long for PostgreSQL, a cut of it and a hash
// of the whole topic.
func tableName(prefix, topic string) string {
	name := prefix + topic
	if len(name) <= maxIdentifier {
		return name
	}
	h := fnv.New32a()
	_, _ = h.Write([]byte(topic))
	suffix := fmt.Sprintf("_%08x", h.Sum32())
	return name[:maxIdentifier-len(suffix)] + suffix
}

// quote quotes a table name; names are checked against validName and the
// prefix rule, so they hold no double quote.
func quote(table string) string { return `"` + table + `"` }

// queueSchema is the watermill-sql schema of the transport's publisher:
// Watermill's PostgreSQL queue schema (a row per message), on tables of
// the transport's own shape (see SchemaInitializingQueries). The
// transport's subscriptions read them without watermill-sql.
type queueSchema struct {
	wsql.PostgreSQLQueueSchema
	table func(topic string) string
}

func newQueueSchema(prefix string) queueSchema {
	table := func(topic string) string { return quote(tableName(prefix, topic)) }
	return queueSchema{
		PostgreSQLQueueSchema: wsql.PostgreSQLQueueSchema{
			GenerateMessagesTableName: table,
			GeneratePayloadType:       func(string) string { return "BYTEA" },
		},
		table: table,
	}
}

// SchemaInitializingQueries returns the statements that create topic's
// table and its notify trigger; they are idempotent, and run in one
// transaction behind an advisory lock (see initTopic). A message is
// leased until claimed_until to the subscription whose token is in
// claimed_by; a table of an earlier version gets the columns it lacks.
func (s queueSchema) SchemaInitializingQueries(params wsql.SchemaInitializingQueriesParams) ([]wsql.Query, error) {
	t := s.table(params.Topic)
	lit := "'" + t + "'" // a valid name holds no single quote either
	return []wsql.Query{
		{Query: `CREATE TABLE IF NOT EXISTS ` + t + ` (
			"offset" BIGSERIAL PRIMARY KEY,
			"uuid" TEXT NOT NULL,
			"payload" BYTEA,
			"metadata" JSON,
			"created_at" TIMESTAMPTZ NOT NULL DEFAULT CURRENT_TIMESTAMP,
			"claimed_until" TIMESTAMPTZ NOT NULL DEFAULT '-infinity',
			"claimed_by" TEXT
		)`},
		// Checked first: ALTER TABLE would lock the table even when the
		// columns are there. claimed_by is the newest.
		{Query: `DO $$ BEGIN
			IF NOT EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = ` + lit + `::regclass AND attname = 'claimed_by' AND NOT attisdropped) THEN
				ALTER TABLE ` + t + ` ADD COLUMN IF NOT EXISTS "claimed_until" TIMESTAMPTZ NOT NULL DEFAULT '-infinity',
					ADD COLUMN IF NOT EXISTS "claimed_by" TEXT;
			END IF;
		END $$`},
		{Query: `CREATE OR REPLACE FUNCTION claimbus_notify() RETURNS trigger LANGUAGE plpgsql AS $$
			BEGIN
				PERFORM pg_notify('` + notifyChannel + `', TG_TABLE_NAME);
				RETURN NULL;
			END $$`},
		{Query: `DO $$ BEGIN
			IF NOT EXISTS (SELECT 1 FROM pg_trigger WHERE tgrelid = ` + lit + `::regclass AND tgname = 'claimbus_notify') THEN
				CREATE TRIGGER claimbus_notify AFTER INSERT ON ` + t + ` FOR EACH STATEMENT EXECUTE FUNCTION claimbus_notify();
			END IF;
		END $$`},
	}, nil
}

// schemaLock is the advisory lock that serialises schema changes of every
// node.
var schemaLock = int64(wsql.DefaultSchemaInitializationLock("claimbus"))

// initTopic creates topic's table and trigger if they are missing, once per
// transport (again after forgetTopic), committing synchronously. Several nodes may do it at once: an advisory lock held for the
// transaction serialises them.
func (t *Transport) initTopic(ctx context.Context, topic string) error {
	if _, ok := t.initialized.Load(topic); ok {
		return nil
	}
	if !validName.MatchString(topic) {
		return fmt.Errorf("sqltransport: %w: %q", bus.ErrInvalidTopic, topic)
	}
	queries, err := t.schema.SchemaInitializingQueries(wsql.SchemaInitializingQueriesParams{Topic: topic})
	if err != nil {
		return err
	}
	err = pgx.BeginFunc(ctx, t.pool, func(tx pgx.Tx) error {
		// The table must outlive a crash once this transport counts it
		// created: with synchronous_commit off (or an asynchronous replica
		// promoted) a crash forgets the last commits, and a table forgotten
		// so would fail every publish of its topic.
		if _, err := tx.Exec(ctx, `SET LOCAL synchronous_commit = on`); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, schemaLock); err != nil {
			return err
		}
		for _, q := range queries {
			if _, err := tx.Exec(ctx, q.Query); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("sqltransport: create the table of topic %q: %w", topic, err)
	}
	t.initialized.Store(topic, struct{}{})
	return nil
}

// forgetTopic makes the next initTopic of topic create its table again if
// it is missing: its table was found gone (dropped, or restored from an
// older backup).
func (t *Transport) forgetTopic(topic string) { t.initialized.Delete(topic) }
