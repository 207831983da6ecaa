package postgres

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/claimbus/claimbus/internal/pgtest"
	"github.com/claimbus/claimbus/lockstore"
)

// bouncerPool opens a pool through a bouncer. PgBouncer before 1.21 keeps
// no prepared statements in transaction mode: the pool uses pgx's exec
// mode (one round trip, unnamed statements), as docs/postgres-production.md
// says.
func bouncerPool(t *testing.T, dsn, node string) *pgxpool.Pool {
	t.Helper()
	return pgtest.Connect(t, dsn+"&default_query_exec_mode=exec", pgtest.PoolConfig{MaxConns: 4, ApplicationName: node})
}

// TestNewRefusesTransactionPooling: New through a PgBouncer in transaction
// mode fails with ErrNoSession, and says what to do, with one lock
// connection (caught beside the pool) or several (caught between them).
func TestNewRefusesTransactionPooling(t *testing.T) {
	t.Parallel()
	c := pgtest.NewCluster(t)
	dsn := pgtest.StartPgBouncer(t, c, pgtest.PoolTransaction)
	for _, conns := range []int{1, 2, 4} {
		pool := bouncerPool(t, dsn, "node-a")
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		s, err := New(ctx, pool, Config{LockConns: conns})
		cancel()
		if err == nil {
			require.NoError(t, s.Close())
		}
		require.ErrorIs(t, err, ErrNoSession, "LockConns %d", conns)
		require.ErrorContains(t, err, "Config.LockConnString", "LockConns %d", conns)
		require.NotErrorIs(t, err, lockstore.ErrUnavailable, "a pooler is not an outage: %v", err)
	}
}

// TestNewThroughSessionPooling: a PgBouncer in session mode keeps a
// session per client: New succeeds, locks work across two nodes, and Held
// knows its own locks (by the server's backend pid, not the bouncer's
// key).
func TestNewThroughSessionPooling(t *testing.T) {
	t.Parallel()
	c := pgtest.NewCluster(t)
	dsn := pgtest.StartPgBouncer(t, c, pgtest.PoolSession)
	ctx := testCtx(t)
	a := newTestStore(t, bouncerPool(t, dsn, "node-a"), watchConfig)
	b := newTestStore(t, bouncerPool(t, dsn, "node-b"), Config{})
	tryLockAcross(ctx, t, a, b)

	key := lockstore.Key{Namespace: "bouncer", ID: "held"}
	l, err := a.TryLock(ctx, key)
	require.NoError(t, err)
	held, err := a.Held(ctx)
	require.NoError(t, err)
	require.Len(t, held, 1)
	require.Equal(t, lockstore.Holder{Key: key, Token: l.Token(), AcquiredAt: held[0].AcquiredAt, Node: "node-a"}, held[0],
		"a knows the lock as its own")
	require.NoError(t, l.Release(ctx))

	// Exclusive's watcher finds its session holding the lock: it looks the
	// session up by the server's pid.
	token, err := runExclusive(ctx, a, key, func(ctx context.Context, conn *pgx.Conn) (int64, error) {
		started := time.Now() // after the grant, which counts as confirmed
		waitFor(t, "a watcher check", func() bool { return watcherConfirmedSince(a, started) || ctx.Err() != nil })
		token, _ := lockstore.TokenFrom(ctx)
		return token, context.Cause(ctx)
	})
	require.NoError(t, err)
	require.Positive(t, token)
}

// TestLockConnStringBesideTransactionPooling: the pools go through a
// PgBouncer in transaction mode, the lock connections straight to the
// server (Config.LockConnString): New succeeds, locks work across two
// nodes, and Serialize (pooled transactions) and Exclusive (a session of
// its own) work too.
func TestLockConnStringBesideTransactionPooling(t *testing.T) {
	t.Parallel()
	c := pgtest.NewCluster(t)
	dsn := pgtest.StartPgBouncer(t, c, pgtest.PoolTransaction)
	ctx := testCtx(t)
	cfg := Config{LockConnString: c.DSN()}
	a := newTestStore(t, bouncerPool(t, dsn, "node-a"), cfg)
	b := newTestStore(t, bouncerPool(t, dsn, "node-b"), cfg)
	tryLockAcross(ctx, t, a, b)

	key := lockstore.Key{Namespace: "bouncer", ID: "serialize"}
	for _, s := range []*Store{a, b} {
		n, err := runSerialize(ctx, s, key, func(ctx context.Context, tx pgx.Tx) (int, error) {
			var n int
			return n, tx.QueryRow(ctx, "SELECT 1").Scan(&n)
		})
		require.NoError(t, err)
		require.Equal(t, 1, n)
		pid, err := runExclusive(ctx, s, key, func(ctx context.Context, conn *pgx.Conn) (uint32, error) {
			var pid uint32
			return pid, conn.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&pid)
		})
		require.NoError(t, err)
		require.Positive(t, pid)
	}
}

// tryLockAcross: a key a holds is locked for b until a releases it.
func tryLockAcross(ctx context.Context, t *testing.T, a, b *Store) {
	t.Helper()
	key := lockstore.Key{Namespace: "bouncer", ID: "across"}
	la, err := a.TryLock(ctx, key)
	require.NoError(t, err)
	_, err = b.TryLock(ctx, key)
	require.ErrorIs(t, err, lockstore.ErrLocked, "a holds the key")
	require.NoError(t, la.Release(ctx))
	lb, err := b.TryLock(ctx, key)
	require.NoError(t, err, "a released the key")
	_, err = a.TryLock(ctx, key)
	require.ErrorIs(t, err, lockstore.ErrLocked, "b holds the key")
	require.NoError(t, lb.Release(ctx))
}

// TestSetupRefusesAChangedPID: a lock connection whose epoch bump answers
// from another backend than its first statement did (what a busy pooler in
// transaction mode does at a reconnect) is refused with ErrNoSession and
// closed.
func TestSetupRefusesAChangedPID(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	s := newTestStore(t, pgtest.Pool(t, pgtest.PoolConfig{MaxConns: 2}), Config{})
	conn, id, err := s.dialLock(ctx)
	require.NoError(t, err)
	require.Equal(t, conn.PgConn().PID(), id.pid, "straight to the server, the pids agree")
	c := newLockConn(s, 99, false)
	other := id
	other.pid++
	err = c.setup(ctx, conn, other)
	require.ErrorIs(t, err, ErrNoSession)
	require.True(t, conn.IsClosed(), "the connection in doubt is closed")
	require.Nil(t, c.conn)

	conn, id, err = s.dialLock(ctx)
	require.NoError(t, err)
	require.NoError(t, c.setup(ctx, conn, id), "the same pid twice is a session")
	require.Equal(t, id.pid, c.pid)
	closeConn(conn)
}
