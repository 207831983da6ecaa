package postgres

import (
	"context"
	"errors"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/claimbus/claimbus/internal/pgtest"
	"github.com/claimbus/claimbus/lockstore"
	"github.com/claimbus/claimbus/lockstore/lockstoretest"
)

// watchConfig is a short lease bound, so that the loss tests are quick.
var watchConfig = Config{LeaseBound: time.Second, KeepAlive: 200 * time.Millisecond}

// fencedWrite is a write a resource fenced by token accepts only from the
// latest holder: it returns how many rows it changed (0 once a later token
// has written).
func fencedWrite(ctx context.Context, q interface {
	Exec(context.Context, string, ...any) (pgconn.CommandTag, error)
}, v string, token int64) (int64, error) {
	tag, err := q.Exec(ctx, "UPDATE fenced SET v = $1, token = $2 WHERE id = 'job' AND token <= $2", v, token)
	return tag.RowsAffected(), err
}

// An Exclusive whose session is killed has its fn's ctx cancelled within
// LeaseBound; the next holder's token is greater, so the old holder's late
// write is refused.
func TestExclusiveLossCancelsWithinLeaseBoundAndTokensFence(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	dsn := pgtest.DSN(t)
	admin := serialAdmin(t, dsn)
	_, err := admin.Exec(ctx, "CREATE TABLE fenced (id text PRIMARY KEY, v text NOT NULL, token int8 NOT NULL); INSERT INTO fenced VALUES ('job', '', 0)")
	require.NoError(t, err)
	poolA := pgtest.Connect(t, dsn, pgtest.PoolConfig{MaxConns: 2, ApplicationName: "node-a"})
	nodeA := newTestStore(t, poolA, watchConfig)
	nodeB := newTestStore(t, pgtest.Connect(t, dsn, pgtest.PoolConfig{MaxConns: 2, ApplicationName: "node-b"}), watchConfig)
	key := lockstore.Key{Namespace: "job", ID: "fenced"}

	type holding struct {
		pid   uint32
		token int64
	}
	held := make(chan holding, 1)
	type stopped struct {
		at    time.Time
		cause error
		err   error
	}
	done := make(chan stopped, 1)
	go func() {
		var r stopped
		_, r.err = runExclusive(ctx, nodeA, key, func(fctx context.Context, conn *pgx.Conn) (int, error) {
			tok, _ := lockstore.TokenFrom(fctx)
			n, err := fencedWrite(fctx, conn, "a", tok)
			if err != nil || n != 1 {
				err = errors.Join(err, errors.New("the first holder's write was refused"))
			}
			held <- holding{conn.PgConn().PID(), tok}
			if err != nil {
				return 0, err
			}
			select {
			case <-fctx.Done():
				r.at, r.cause = time.Now(), context.Cause(fctx)
			case <-time.After(4 * time.Second):
			}
			return 0, nil
		})
		done <- r
	}()
	a := <-held
	require.Positive(t, a.token, "fn's ctx carries no fencing token")
	killed := time.Now()
	var ok bool
	require.NoError(t, admin.QueryRow(ctx, "SELECT pg_terminate_backend($1, 10000)", int64(a.pid)).Scan(&ok))
	require.True(t, ok)
	r := <-done
	require.ErrorIs(t, r.cause, lockstore.ErrLockLost, "fn's ctx was not cancelled for the loss")
	require.ErrorIs(t, r.err, lockstore.ErrLockLost)
	t.Logf("fn's ctx cancelled %v after the kill", r.at.Sub(killed))
	require.Less(t, r.at.Sub(killed), watchConfig.LeaseBound)

	// The next holder writes with a greater token; the old one, writing
	// late through its pool, is refused.
	_, err = runExclusive(ctx, nodeB, key, func(ctx context.Context, conn *pgx.Conn) (int, error) {
		tok := lockstoretest.RequireToken(t, ctx)
		require.Greater(t, tok, a.token)
		n, err := fencedWrite(ctx, conn, "b", tok)
		require.NoError(t, err)
		require.Equal(t, int64(1), n)
		return 0, nil
	})
	require.NoError(t, err)
	n, err := fencedWrite(ctx, poolA, "a, late", a.token)
	require.NoError(t, err)
	require.Zero(t, n, "the stale holder's write went through")
	var v string
	require.NoError(t, admin.QueryRow(ctx, "SELECT v FROM fenced WHERE id = 'job'").Scan(&v))
	require.Equal(t, "b", v)
}

// The watcher has a connection of its own: an application that holds every
// connection of its pool does not make a running Exclusive look lost.
func TestExclusivePoolExhaustionIsNotALoss(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	const maxConns = 2
	pool := pgtest.Pool(t, pgtest.PoolConfig{MaxConns: maxConns})
	s := newTestStore(t, pool, watchConfig)
	key := lockstore.Key{Namespace: "job", ID: "starved pool"}

	running := make(chan struct{})
	finish := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		_, err := runExclusive(ctx, s, key, func(ctx context.Context, conn *pgx.Conn) (int, error) {
			close(running)
			select {
			case <-finish:
				return 0, nil
			case <-ctx.Done():
				return 0, context.Cause(ctx)
			}
		})
		done <- err
	}()
	<-running
	// Every pooled connection is taken (Exclusive's was hijacked: the pool
	// does not count it), for a few lease bounds.
	var conns []*pgxpool.Conn
	release := func() {
		for _, c := range conns {
			c.Release()
		}
		conns = nil
	}
	defer release()
	for range maxConns {
		c, err := pool.Acquire(ctx)
		require.NoError(t, err)
		conns = append(conns, c)
	}
	select {
	case err := <-done:
		t.Fatalf("Exclusive ended while the pool was exhausted: %v", err)
	case <-time.After(2 * watchConfig.LeaseBound):
	}
	release()
	close(finish)
	require.NoError(t, <-done)
}

// silentNetwork makes the connections dialed through it go silent on
// demand: writes are swallowed, so every round trip waits for an answer
// that never comes, as when the network between node and server is cut.
type silentNetwork struct{ silent atomic.Bool }

type silentConn struct {
	net.Conn
	n *silentNetwork
}

func (c silentConn) Write(b []byte) (int, error) {
	if c.n.silent.Load() {
		return len(b), nil
	}
	return c.Conn.Write(b)
}

// When no check can confirm the lock (the network went silent), fn's ctx
// is cancelled within LeaseBound of the last confirmation.
func TestExclusiveUnconfirmedLockIsLostWithinLeaseBound(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	silence := &silentNetwork{}
	cfg, err := pgxpool.ParseConfig(pgtest.DSN(t))
	require.NoError(t, err)
	cfg.MaxConns = 2
	dial := cfg.ConnConfig.DialFunc
	cfg.ConnConfig.DialFunc = func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return silentConn{Conn: c, n: silence}, nil
	}
	s := newTestStore(t, serialPoolFromConfig(t, cfg), watchConfig)
	// Speak again before the store closes (its cleanup runs after ours).
	t.Cleanup(func() { silence.silent.Store(false) })
	key := lockstore.Key{Namespace: "job", ID: "silent"}

	running := make(chan struct{})
	type stopped struct {
		at    time.Time
		cause error
	}
	done := make(chan stopped, 1)
	go func() {
		var r stopped
		_, _ = runExclusive(ctx, s, key, func(ctx context.Context, conn *pgx.Conn) (int, error) {
			close(running)
			select {
			case <-ctx.Done():
				r.at, r.cause = time.Now(), context.Cause(ctx)
			case <-time.After(4 * time.Second):
			}
			return 0, nil
		})
		done <- r
	}()
	<-running
	// Once a check has confirmed the hold, cut the network: the loss must
	// then come within LeaseBound of that confirmation.
	started := time.Now()
	waitFor(t, "a check confirmed the hold", func() bool { return watcherConfirmedSince(s, started) })
	silenced := time.Now()
	silence.silent.Store(true)
	r := <-done
	silence.silent.Store(false)
	require.ErrorIs(t, r.cause, lockstore.ErrLockLost)
	t.Logf("fn's ctx cancelled %v after the network went silent", r.at.Sub(silenced))
	require.Less(t, r.at.Sub(silenced), watchConfig.LeaseBound+50*time.Millisecond)
}

// watcherConfirmedSince reports whether the store's watcher has confirmed
// one of its holds by a check sent after t.
func watcherConfirmedSince(s *Store, t time.Time) bool {
	s.calls.mu.Lock()
	w := s.calls.watcher
	s.calls.mu.Unlock()
	if w == nil {
		return false
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	for h := range w.holds {
		if h.confirmed.After(t) {
			return true
		}
	}
	return false
}
