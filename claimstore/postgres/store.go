package postgres

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/claimbus/claimbus/claimstore"
	"github.com/claimbus/claimbus/internal/pgerr"
)

// Names of the tables in Config.Schema.
const (
	reservationTable = "claim_reservation"
	outcomeTable     = "claim_outcome"
)

// schemaLockKey is the bigint advisory lock New holds, for the length of
// its transaction, while it creates the schema and the tables, so that
// nodes starting at once do not race on CREATE ... IF NOT EXISTS (which can
// fail with a unique violation when two sessions run it together). It is
// lockstore/postgres's, so the two never create one schema at once either.
const schemaLockKey int64 = 0x636c61696d627573 // "claimbus"

// Store is a claimstore.Store on two tables of a PostgreSQL database, shared
// by every node using it. It is safe for concurrent use. It starts no
// goroutine and holds no connection between calls, so it needs no Close.
type Store struct {
	pool *pgxpool.Pool
	cfg  Config

	// reservations and outcomes are the sanitized, schema-qualified names
	// of the tables.
	reservations string
	outcomes     string
	// reserveQ and holdersQ are the statements of Reserve.
	reserveQ, holdersQ string

	reserve *batcher[reserveReq, reserveRes]
	confirm *batcher[ownedReq, bool]
	cancel  *batcher[ownedReq, struct{}]
}

var _ claimstore.Store = (*Store)(nil)

// New returns a store on pool's database. It validates cfg and creates the
// schema and the tables when they are missing (safe when many nodes start
// at once); ctx bounds that.
func New(ctx context.Context, pool *pgxpool.Pool, cfg Config) (*Store, error) {
	if pool == nil {
		return nil, errors.New("postgres: New: nil pool")
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	s := &Store{
		pool:         pool,
		cfg:          cfg,
		reservations: pgx.Identifier{cfg.Schema, reservationTable}.Sanitize(),
		outcomes:     pgx.Identifier{cfg.Schema, outcomeTable}.Sanitize(),
	}
	s.reserveQ, s.holdersQ = s.reserveSQL(), s.holdersSQL()
	s.reserve = newBatcher(cfg.MaxBatch, cfg.BatchLanes, reserveReq.rowKey, s.reserveBatch)
	s.confirm = newBatcher(cfg.MaxBatch, cfg.BatchLanes, nil, s.confirmBatch)
	s.cancel = newBatcher(cfg.MaxBatch, cfg.BatchLanes, nil, s.cancelBatch)
	if err := s.createSchema(ctx); err != nil {
		return nil, s.fail(ctx, "New: create schema "+cfg.Schema+" and its tables", err)
	}
	return s, nil
}

// createSchema creates the schema and the tables unless they all exist.
// IDs and namespaces sort in byte order (COLLATE "C"), which List pages
// by. Reservation pages keep a fifth free, so that Confirm's update of a
// row fits beside it (a HOT update, which writes no index entry).
func (s *Store) createSchema(ctx context.Context) error {
	var exists bool
	err := s.pool.QueryRow(ctx, "SELECT to_regclass($1) IS NOT NULL AND to_regclass($2) IS NOT NULL",
		s.reservations, s.outcomes).Scan(&exists)
	if err != nil || exists {
		return err
	}
	expiresIndex := pgx.Identifier{outcomeTable + "_expires"}.Sanitize()
	return pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		for _, q := range []string{
			"SELECT pg_advisory_xact_lock(" + fmt.Sprint(schemaLockKey) + ")",
			// A crash must not lose the tables once New has returned,
			// whatever the server's synchronous_commit.
			"SET LOCAL synchronous_commit = on",
			"CREATE SCHEMA IF NOT EXISTS " + pgx.Identifier{s.cfg.Schema}.Sanitize(),
			"CREATE TABLE IF NOT EXISTS " + s.reservations + ` (
				namespace text COLLATE "C" NOT NULL,
				id text COLLATE "C" NOT NULL,
				owner text NOT NULL,
				confirmed bool NOT NULL,
				at timestamptz NOT NULL,
				PRIMARY KEY (namespace, id)) WITH (fillfactor = 80)`,
			"CREATE TABLE IF NOT EXISTS " + s.outcomes + ` (
				namespace text COLLATE "C" NOT NULL,
				id text COLLATE "C" NOT NULL,
				fingerprint bytea,
				result bytea,
				err bytea,
				expires timestamptz NOT NULL,
				PRIMARY KEY (namespace, id))`,
			"CREATE INDEX IF NOT EXISTS " + expiresIndex + " ON " + s.outcomes + " (expires)",
		} {
			if _, err := tx.Exec(ctx, q); err != nil {
				return err
			}
		}
		return nil
	})
}

// fail wraps err, from a statement of op run under ctx: it matches
// claimstore.ErrUnavailable when the database could not be reached or
// dropped the session.
func (s *Store) fail(ctx context.Context, op string, err error) error {
	if pgerr.IsConnectionError(ctx, err) {
		return fmt.Errorf("postgres: %s: %w: %w", op, claimstore.ErrUnavailable, err)
	}
	return fmt.Errorf("postgres: %s: %w", op, err)
}
