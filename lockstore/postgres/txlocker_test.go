package postgres

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/claimbus/claimbus/internal/pgtest"
	"github.com/claimbus/claimbus/lockstore/lockstoretest"
)

// TestTxLockerConformance runs the lockstore.TxLocker suite on stores of
// one database, each with a pool of its own, and a peer store as another
// node. A held xact lock ends with
// its session: EndLock terminates the transaction's backend.
func TestTxLockerConformance(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	dsn := pgtest.DSN(t)
	admin := pgtest.Connect(t, dsn, pgtest.PoolConfig{MaxConns: 2, ApplicationName: "txconformance-admin"})
	_, err := admin.Exec(ctx, "CREATE TABLE marker (name text PRIMARY KEY)")
	require.NoError(t, err)
	type querier interface {
		Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
		QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	}
	write := func(ctx context.Context, q querier, name string) error {
		_, err := q.Exec(ctx, "INSERT INTO marker (name) VALUES ($1)", name)
		return err
	}
	seen := func(ctx context.Context, q querier, name string) (bool, error) {
		var ok bool
		err := q.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM marker WHERE name = $1)", name).Scan(&ok)
		return ok, err
	}
	lockstoretest.RunTx(t, func(t *testing.T) lockstoretest.TxStore[pgx.Tx, *pgx.Conn] {
		pool := pgtest.Connect(t, dsn, pgtest.PoolConfig{MaxConns: 4, ApplicationName: "txconformance"})
		s := serialStore(t, pool)
		return lockstoretest.TxStore[pgx.Tx, *pgx.Conn]{
			Locker:    s,
			Peer:      serialStore(t, pgtest.Connect(t, dsn, pgtest.PoolConfig{MaxConns: 4, ApplicationName: "txconformance-peer"})),
			Close:     s.Close,
			Write:     func(ctx context.Context, tx pgx.Tx, name string) error { return write(ctx, tx, name) },
			WriteQ:    func(ctx context.Context, conn *pgx.Conn, name string) error { return write(ctx, conn, name) },
			Seen:      func(ctx context.Context, tx pgx.Tx, name string) (bool, error) { return seen(ctx, tx, name) },
			Committed: func(ctx context.Context, name string) (bool, error) { return seen(ctx, admin, name) },
			Begin:     func(ctx context.Context) (pgx.Tx, error) { return pool.Begin(ctx) },
			Commit:    func(ctx context.Context, tx pgx.Tx) error { return tx.Commit(ctx) },
			Rollback:  func(ctx context.Context, tx pgx.Tx) error { return tx.Rollback(ctx) },
			EndLock: func(ctx context.Context, tx pgx.Tx) error {
				// pg_terminate_backend with a timeout returns once the
				// backend is gone, and its locks with it.
				var ok bool
				if err := admin.QueryRow(ctx, "SELECT pg_terminate_backend($1, 10000)", int32(tx.Conn().PgConn().PID())).Scan(&ok); err != nil {
					return err
				}
				require.True(t, ok, "the backend did not end")
				return nil
			},
		}
	})
}
