package app

import (
	"context"
	"errors"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/claimbus/claimbus/claimstore"
	cspg "github.com/claimbus/claimbus/claimstore/postgres"
	"github.com/claimbus/claimbus/internal/pgerr"
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
	return pgBackend{store: store, txLocking: txLocking[pgx.Tx, *pgx.Conn]{
		locker: store,
		wrap:   func(tx pgx.Tx) querier { return pgQuerier{tx} },
	}}
}

type pgBackend struct {
	store *postgres.Store
	txLocking[pgx.Tx, *pgx.Conn]
}

func (b pgBackend) Locker() lockstore.Locker { return b.store }
func (b pgBackend) Name() string             { return "postgres" }

func (b pgBackend) Ping(ctx context.Context) error { return b.store.Pool().Ping(ctx) }

func (b pgBackend) claims(ctx context.Context) (claimstore.Store, error) {
	return cspg.New(ctx, b.store.Pool(), cspg.Config{})
}

func (b pgBackend) db() querier { return pgQuerier{b.store.Pool()} }

func (b pgBackend) tx(ctx context.Context, fn txFunc) error {
	return pgx.BeginFunc(ctx, b.store.Pool(), func(tx pgx.Tx) error {
		return fn(ctx, pgQuerier{tx})
	})
}

func (pgBackend) isUniqueViolation(err error) bool {
	var e *pgconn.PgError
	return errors.As(err, &e) && e.Code == "23505"
}

// isUnavailable: a failed connect, a connection closed or reset, SQLSTATE
// class 08 (connection exception), 57P01 to 57P03 (admin shutdown, crash
// shutdown, cannot connect now), 53300 (too many connections), a lock
// store that cannot reach the server, or a timeout that is not ctx's own
// (a dial that hung).
func (pgBackend) isUnavailable(ctx context.Context, err error) bool {
	return pgerr.IsConnectionError(ctx, err) ||
		errors.Is(err, lockstore.ErrUnavailable) || errors.Is(err, lockstore.ErrClosed) || errors.Is(err, claimstore.ErrUnavailable)
}

// isBusy: never; a writer waits in PostgreSQL's lock queue, within the
// request's deadline.
func (pgBackend) isBusy(error) bool { return false }

// isBadValue: SQLSTATE class 22 (data exception: a NUL byte, bytes that
// are not UTF-8, a value out of range) and 54000 (a value too long for an
// index).
func (pgBackend) isBadValue(err error) bool {
	var e *pgconn.PgError
	return errors.As(err, &e) && (strings.HasPrefix(e.Code, "22") || e.Code == "54000")
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
