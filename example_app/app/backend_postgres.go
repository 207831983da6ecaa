package app

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/claimbus/claimbus/lockstore"
	"github.com/claimbus/claimbus/lockstore/postgres"
)

// Namespaces are the lock namespaces of the example, registered under fixed
// numbers so that they read well in pg_locks (classid). Every node of one
// database must register the same map: give it to postgres.Config.
func Namespaces() map[string]int32 {
	return map[string]int32{
		NamespaceStaffEmail: 1,
		NamespaceTransfer:   2,
		NamespaceLobby:      3,
		namespaceSchema:     4,
		NamespaceNode:       5,
	}
}

// PostgresBackend returns the backend of a node on store's database: the
// handlers write through store.Pool(), and the store's advisory locks
// coordinate every node sharing that database. Give the store
// Namespaces() in its Config.
func PostgresBackend(store *postgres.Store) Backend {
	return pgBackend{store: store}
}

type pgBackend struct{ store *postgres.Store }

func (b pgBackend) Locker() lockstore.Locker { return b.store }
func (b pgBackend) Name() string             { return "postgres" }

func (b pgBackend) Ping(ctx context.Context) error { return b.store.Pool().Ping(ctx) }

func (b pgBackend) db() querier { return pgQuerier{b.store.Pool()} }

func (b pgBackend) tx(ctx context.Context, fn txFunc) error {
	return pgx.BeginFunc(ctx, b.store.Pool(), func(tx pgx.Tx) error {
		return fn(ctx, pgQuerier{tx})
	})
}

func (b pgBackend) serialize(ctx context.Context, key lockstore.Key, fn txFunc) error {
	_, err := postgres.Serialize(ctx, b.store, key, func(ctx context.Context, tx pgx.Tx) (struct{}, error) {
		return struct{}{}, fn(ctx, pgQuerier{tx})
	})
	return err
}

func (pgBackend) isUniqueViolation(err error) bool {
	var e *pgconn.PgError
	return errors.As(err, &e) && e.Code == "23505"
}

// pgQuerier is a querier on pgx: a pool or a transaction.
type pgQuerier struct {
	q interface {
		Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
		QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	}
}

func (p pgQuerier) exec(ctx context.Context, sql string, args ...any) (int64, error) {
	tag, err := p.q.Exec(ctx, sql, args...)
	if err != nil {
		return 0, err
	}
	return tag.RowsAffected(), nil
}

func (p pgQuerier) queryRow(ctx context.Context, sql string, args ...any) row {
	return p.q.QueryRow(ctx, sql, args...)
}
