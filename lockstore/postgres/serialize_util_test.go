package postgres

import (
	"context"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/claimbus/claimbus/lockstore"
)

// serialStore opens a store for the Serialize and Exclusive tests, closed
// when t ends (before pgtest closes the pool). Its KeepAlive is short so
// that Exclusive notices a dead connection quickly.
func serialStore(t testing.TB, pool *pgxpool.Pool) *Store {
	t.Helper()
	return newTestStore(t, pool, Config{KeepAlive: 50 * time.Millisecond})
}

// serialWrites counts the writes on every connection of a pool: pgconn
// flushes one request per round trip, so writes are round trips.
type serialWrites struct{ n atomic.Int64 }

type serialCountingConn struct {
	net.Conn
	c   *serialWrites
	own *atomic.Int64 // this connection's writes
}

func (c serialCountingConn) Write(b []byte) (int, error) {
	c.c.n.Add(1)
	c.own.Add(1)
	return c.Conn.Write(b)
}

// serialOwnWrites returns the writes so far of conn, one of a counting
// pool's connections.
func serialOwnWrites(t testing.TB, conn *pgx.Conn) int64 {
	t.Helper()
	cc, ok := conn.PgConn().Conn().(serialCountingConn)
	require.True(t, ok, "not a counting connection")
	return cc.own.Load()
}

// serialConnWrites returns the writes so far of the connection a pool of
// one connection holds (the store's own lock connections, dialed with the
// pool's configuration, count into serialWrites but not here).
func serialConnWrites(ctx context.Context, t testing.TB, pool *pgxpool.Pool) int64 {
	t.Helper()
	c, err := pool.Acquire(ctx)
	require.NoError(t, err)
	defer c.Release()
	return serialOwnWrites(t, c.Conn())
}

// serialCountingPool opens a pool on dsn whose connections count their writes
// into w, and that never pings on acquire (a ping is a round trip pgxpool
// adds after a second idle, which would blur the count). It is closed when
// t ends.
func serialCountingPool(t testing.TB, dsn string, maxConns int32, w *serialWrites) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(dsn)
	require.NoError(t, err)
	cfg.MaxConns = maxConns
	cfg.ConnConfig.RuntimeParams["application_name"] = "counting"
	cfg.ShouldPing = func(context.Context, pgxpool.ShouldPingParams) bool { return false }
	cfg.ConnConfig.DialFunc = func(ctx context.Context, network, addr string) (net.Conn, error) {
		var d net.Dialer
		c, err := d.DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return serialCountingConn{Conn: c, c: w, own: new(atomic.Int64)}, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	return pool
}

// serialAdmin opens a connection of its own on dsn, outside every store's
// pool, to look at pg_locks and pg_stat_activity.
func serialAdmin(t testing.TB, dsn string) *pgx.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := pgx.Connect(ctx, dsn)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close(context.Background()) })
	return c
}

// serialLockCountSQL counts the sessions that hold (granted) or wait for
// (not granted) the two-int advisory lock ($1, $2) in this database.
const serialLockCountSQL = `
	SELECT count(*) FILTER (WHERE granted), count(*) FILTER (WHERE NOT granted)
	FROM pg_locks
	WHERE locktype = 'advisory' AND objsubid = 2 AND classid::int8 = $1 AND objid::int8 = $2
	  AND database = (SELECT oid FROM pg_database WHERE datname = current_database())`

// serialLockCount returns how many sessions hold (granted) or wait for
// (not granted) the two-int advisory lock id.
func serialLockCount(ctx context.Context, t testing.TB, q interface {
	QueryRow(context.Context, string, ...any) pgx.Row
}, id LockID) (granted, waiting int) {
	t.Helper()
	require.NoError(t, q.QueryRow(ctx, serialLockCountSQL, int64(id.Namespace), int64(id.ID)).Scan(&granted, &waiting))
	return granted, waiting
}

// serialPoolFromConfig opens a pool with cfg, closed when t ends.
func serialPoolFromConfig(t testing.TB, cfg *pgxpool.Config) *pgxpool.Pool {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	return pool
}

// serialBackendHolds reports whether backend pid holds the lock id.
func serialBackendHolds(ctx context.Context, t testing.TB, q interface {
	QueryRow(context.Context, string, ...any) pgx.Row
}, pid uint32, id LockID) bool {
	t.Helper()
	var held bool
	require.NoError(t, q.QueryRow(ctx, `
		SELECT EXISTS (SELECT 1 FROM pg_locks
			WHERE locktype = 'advisory' AND objsubid = 2 AND granted AND pid = $1
			  AND classid::int8 = $2 AND objid::int8 = $3)`,
		int64(pid), int64(id.Namespace), int64(id.ID)).Scan(&held))
	return held
}

func serialLockID(t testing.TB, s *Store, k lockstore.Key) LockID {
	t.Helper()
	id, err := s.lockID(k)
	require.NoError(t, err)
	return id
}

// serialQueued returns how many of s's callers hold or wait for id's turn
// in s.serial: its waiters, plus one for the holder. Both are read under
// one shard lock, so the count is never between a pass and a take.
func serialQueued(s *Store, id LockID) int {
	return queuedWithHolder(s.serial, id)
}

// queuedWithHolder returns how many claimants hold or wait for id's turn
// in q: q.waiting(id), plus one while the turn is held.
func queuedWithHolder(q *turnQueue, id LockID) int {
	return q.queued(id)
}

// requireNoErrors waits for wg, then fails t on any error its goroutines
// sent on errs (buffered to hold them all).
func requireNoErrors(t testing.TB, wg *sync.WaitGroup, errs chan error, msgAndArgs ...any) {
	t.Helper()
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err, msgAndArgs...)
	}
}

// occupancy counts the callers inside a critical section, and the most
// that were ever inside at once.
type occupancy struct{ inside, most atomic.Int32 }

// enter counts a caller in; the returned func counts it out.
func (o *occupancy) enter() (leave func()) {
	now := o.inside.Add(1)
	for m := o.most.Load(); now > m && !o.most.CompareAndSwap(m, now); m = o.most.Load() {
	}
	return func() { o.inside.Add(-1) }
}
