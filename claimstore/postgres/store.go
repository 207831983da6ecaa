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

// Store is the claimstore.Store on PostgreSQL. Its Queue methods serve a
// caller's own transaction (see tx.go).
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

// New returns a Store on two tables of pool's database, shared
// by every node using it. It validates cfg and brings the schema up to
// date (see Migrations: safe when many nodes start at once; with
// Config.NoAutoMigrate it only checks the version); ctx bounds that. The
// store is safe for concurrent use. It starts no goroutine and holds no
// connection between calls, so it needs no Close.
func New(ctx context.Context, pool *pgxpool.Pool, cfg Config) (*Store, error) {
	if pool == nil {
		return nil, errors.New("postgres: New: nil pool")
	}
	if err := cfg.validate(); err != nil {
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
	if err := s.ensureSchema(ctx); err != nil {
		if errors.Is(err, ErrSchemaOutdated) {
			return nil, fmt.Errorf("postgres: New: %w", err)
		}
		return nil, s.fail(ctx, "New", err)
	}
	return s, nil
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
