package postgres

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/claimbus/claimbus/internal/pgtest"
	"github.com/claimbus/claimbus/lockstore"
)

// Without a ctx deadline, Serialize's transaction and Exclusive's lock
// wait are bounded by statement_timeout (Config.StatementTimeout), set for
// the transaction only; a lower one configured on the pool stays.
func TestStatementTimeoutWithoutDeadline(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	dsn := pgtest.DSN(t)
	pool := pgtest.Connect(t, dsn, pgtest.PoolConfig{MaxConns: 2})
	s := newTestStore(t, pool, Config{StatementTimeout: 300 * time.Millisecond})
	key := lockstore.Key{Namespace: "stmt", ID: "timeout"}
	show := func(ctx context.Context, t *testing.T) string {
		t.Helper()
		v, err := runSerialize(ctx, s, key, func(ctx context.Context, tx pgx.Tx) (string, error) {
			var v string
			err := tx.QueryRow(ctx, "SHOW statement_timeout").Scan(&v)
			return v, err
		})
		require.NoError(t, err)
		return v
	}
	// No deadline, but cancelled after a while: the old behaviour (no
	// bound) fails the test instead of hanging it.
	noDeadline, cancel := context.WithCancel(context.Background())
	defer cancel()
	stop := time.AfterFunc(4*time.Second, cancel)
	defer stop.Stop()

	require.Equal(t, "300ms", show(noDeadline, t))
	var session string
	require.NoError(t, pool.QueryRow(ctx, "SHOW statement_timeout").Scan(&session))
	require.Equal(t, "0", session, "the setting outlived the transaction")
	dctx, dcancel := context.WithTimeout(ctx, time.Minute)
	defer dcancel()
	require.Equal(t, "0", show(dctx, t), "with a deadline, the deadline bounds the transaction")

	cfg := pool.Config()
	// A session timeout below the store's is kept. Every statement of the
	// pool runs under it, New's too, so it is 1s, not one that a loaded
	// machine's DDL can outlast (100ms failed New with 57014 in CI).
	cfg.ConnConfig.RuntimeParams["statement_timeout"] = "1000"
	lower := newTestStore(t, serialPoolFromConfig(t, cfg), Config{StatementTimeout: 3 * time.Second})
	v, err := runSerialize(noDeadline, lower, key, func(ctx context.Context, tx pgx.Tx) (string, error) {
		var v string
		err := tx.QueryRow(ctx, "SHOW statement_timeout").Scan(&v)
		return v, err
	})
	require.NoError(t, err)
	require.Equal(t, "1s", v)

	// Another node holds the key: the waits end after StatementTimeout.
	id := serialLockID(t, s, key)
	holder := serialAdmin(t, dsn)
	_, err = holder.Exec(ctx, "SELECT pg_advisory_lock($1, $2)", id.Namespace, id.ID)
	require.NoError(t, err)
	start := time.Now()
	_, err = runSerialize(noDeadline, s, key, func(context.Context, pgx.Tx) (int, error) { return 0, nil })
	require.ErrorIs(t, err, lockstore.ErrTimeout)
	require.NotErrorIs(t, err, context.Canceled)
	require.Less(t, time.Since(start), 2*time.Second)
	start = time.Now()
	_, err = runExclusive(noDeadline, s, key, func(context.Context, *pgx.Conn) (int, error) { return 0, nil })
	require.ErrorIs(t, err, lockstore.ErrTimeout)
	require.NotErrorIs(t, err, context.Canceled)
	require.Less(t, time.Since(start), 2*time.Second)
}
