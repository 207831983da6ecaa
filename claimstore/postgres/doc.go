// Package postgres is the PostgreSQL backend of claimstore: a Store whose
// reservations and outcomes live in two tables of one database, so that
// every node sharing it sees the same ones.
//
//	pool, err := pgxpool.New(ctx, "postgres://app@db/app")
//	if err != nil {
//		return err
//	}
//	store, err := postgres.New(ctx, pool, postgres.Config{})
//	if err != nil {
//		return err
//	}
//	held, reserved, err := store.Reserve(ctx, key, commandID, time.Minute)
//
// # Tables
//
// The schema Config.Schema (default "claimbus") holds claim_reservation
// (namespace, id, owner, confirmed, at; keyed by namespace and id) and
// claim_outcome (namespace, id, fingerprint, result, err, expires; keyed
// by namespace and id, indexed by expires). Namespaces and IDs are stored
// COLLATE "C", so List pages in byte order.
//
// # Migrations
//
// The tables are created by versioned migrations, goose files
// (github.com/pressly/goose/v3) exported as Migrations and recorded in the
// goose version table claimbus_claimstore_version (VersionTable) in
// Config.Schema. New applies the pending ones on a connection of its own,
// under the session advisory lock lockstore/postgres takes too, so that
// nodes starting together take turns; once the schema is at SchemaVersion
// that costs New one read. The first migration adopts tables an earlier
// release created, rows and all. With Config.NoAutoMigrate, New creates
// nothing and fails with ErrSchemaOutdated until the schema is migrated,
// by Migrate or by goose itself (the files name no schema: run them with
// search_path set to Config.Schema, the schema created first; see
// docs/postgres-production.md). A role that may not create tables can run
// a Store once they are migrated, given SELECT on the version table.
// Behind PgBouncer in transaction mode, migrate from a direct connection
// (Migrate on a pool straight to the server) and set NoAutoMigrate.
//
// # Clock
//
// Every age and expiry is computed by the server's clock (now(), the start
// of the statement's transaction), never by the nodes', so nodes whose
// clocks differ agree on them. The server counts microseconds: a maxLag or
// a retention is rounded up to a whole microsecond.
//
// # Statements and batches
//
// Every call is one statement, run under the caller's ctx, except that
// calls of Reserve, Confirm and Cancel made while another call of the same
// method runs wait and then go together, up to Config.MaxBatch, in one
// statement over arrays: a storm of claims costs a round trip per batch
// rather than per claim. A call that finds none running goes at once,
// alone. A batch runs until the ctx of every one of its callers has ended;
// a caller whose ctx ends before its batch is sent leaves it, and nothing
// of its call is written; one whose ctx ends after returns ctx's error, and
// its call may or may not have taken effect (as for any statement cut off
// on its way). Two calls on one key never share a batch.
// Config.BatchLanes lets more than one statement of a method run at once
// (default 1: the largest batches, the least work for the server). Batch
// statements that join their arrays to a table (Confirm, Cancel, the read
// of Reserve's holders) go unprepared, planned at each run for the table
// as it is then, since a cached plan made while the table was small keeps
// scanning it whole once it has grown. Reserve's write reads the table
// only through its unique index, whatever the plan, and goes in the pool's
// default mode (prepared, by default), like the single statements.
//
// Reserve writes in one statement (INSERT ... ON CONFLICT DO UPDATE ...
// WHERE the value may be taken over), which returns the rows it wrote.
// When some were not, a second statement reads their holders; a request
// whose row shows no holder that holds (it changed between the two) is
// sent again, until each is written or sees its holder. The holder
// reported may be a version of the row a moment old.
//
// # Errors
//
// An error of a call whose database could not be reached, or dropped the
// session, matches claimstore.ErrUnavailable (and
// lockstore.ErrUnavailable); the driver's error stays wrapped in it.
package postgres
