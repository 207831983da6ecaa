package postgres

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/claimbus/claimbus/internal/pgtest"
	"github.com/claimbus/claimbus/lockstore"
)

func TestExclusiveRunsOnceClusterWide(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	dsn := pgtest.DSN(t)
	serialCounterTable(ctx, t, dsn, "job")
	pools := []string{"node-a", "node-b"}
	var nodes []*Store
	for _, name := range pools {
		nodes = append(nodes, serialStore(t, pgtest.Connect(t, dsn, pgtest.PoolConfig{MaxConns: 4, ApplicationName: name})))
	}
	key := lockstore.Key{Namespace: "tournament.tick", ID: "all"}
	id := serialLockID(t, nodes[0], key)
	const perNode, rounds = 6, 5

	var inside occupancy
	var wg sync.WaitGroup
	errs := make(chan error, 2*perNode*rounds)
	for _, s := range nodes {
		for range perNode {
			wg.Go(func() {
				for range rounds {
					_, err := runExclusive(ctx, s, key, func(ctx context.Context, conn *pgx.Conn) (int, error) {
						defer inside.enter()()
						// A session lock, no transaction: each write commits by itself.
						if conn.PgConn().TxStatus() != 'I' {
							return 0, errors.New("fn runs inside a transaction")
						}
						var held bool
						if err := conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory'
							AND pid = pg_backend_pid() AND granted AND objsubid = 2 AND classid::int8 = $1 AND objid::int8 = $2)`,
							int64(id.Namespace), int64(id.ID)).Scan(&held); err != nil {
							return 0, err
						}
						if !held {
							return 0, errors.New("fn's connection does not hold the session lock")
						}
						var n int
						if err := conn.QueryRow(ctx, "SELECT n FROM counter WHERE id = 'job'").Scan(&n); err != nil {
							return 0, err
						}
						_, err := conn.Exec(ctx, "UPDATE counter SET n = $1 WHERE id = 'job'", n+1)
						return n + 1, err
					})
					if err != nil {
						errs <- err
					}
				}
			})
		}
	}
	requireNoErrors(t, &wg, errs)
	require.Equal(t, int32(1), inside.most.Load())
	require.Equal(t, 2*perNode*rounds, counterValue(ctx, t, nodes[0].pool, "job"))
	granted, waiting := serialLockCount(ctx, t, nodes[0].pool, id)
	require.Zero(t, granted+waiting, "a lock outlived Exclusive")
}

func TestExclusiveDedicatedConnection(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	dsn := pgtest.DSN(t)
	pool := pgtest.Connect(t, dsn, pgtest.PoolConfig{MaxConns: 2, ApplicationName: "job-node"})
	s := serialStore(t, pool)
	admin := serialAdmin(t, dsn)
	key := lockstore.Key{Namespace: "job", ID: "dedicated"}
	id := serialLockID(t, s, key)

	pid, err := runExclusive(ctx, s, key, func(ctx context.Context, conn *pgx.Conn) (uint32, error) {
		// Hijacked: the pool does not count it, and can still give out
		// all of its connections.
		require.Zero(t, pool.Stat().AcquiredConns())
		lockstore.AfterCommit(ctx, func() {}) // outside a transaction: at once, no trace
		return conn.PgConn().PID(), nil
	})
	require.NoError(t, err)
	require.NotZero(t, pid)
	// Closed at the end: the backend is gone, never back in the pool.
	waitFor(t, "the dedicated backend exits", func() bool {
		var n int
		require.NoError(t, admin.QueryRow(ctx, "SELECT count(*) FROM pg_stat_activity WHERE pid = $1", int64(pid)).Scan(&n))
		return n == 0
	})
	granted, waiting := serialLockCount(ctx, t, admin, id)
	require.Zero(t, granted+waiting)
	require.Zero(t, serialQueued(s, id))
}

func TestExclusiveCancelsFnWhenItsConnectionDies(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	dsn := pgtest.DSN(t)
	nodeA := serialStore(t, pgtest.Connect(t, dsn, pgtest.PoolConfig{MaxConns: 2, ApplicationName: "node-a"}))
	nodeB := serialStore(t, pgtest.Connect(t, dsn, pgtest.PoolConfig{MaxConns: 2, ApplicationName: "node-b"}))
	admin := serialAdmin(t, dsn)
	key := lockstore.Key{Namespace: "job", ID: "fragile"}

	pids := make(chan uint32, 1)
	type result struct {
		got   string
		err   error
		cause error
	}
	done := make(chan result, 1)
	go func() {
		var r result
		r.got, r.err = runExclusive(ctx, nodeA, key, func(fctx context.Context, conn *pgx.Conn) (string, error) {
			pids <- conn.PgConn().PID()
			select {
			case <-fctx.Done():
				r.cause = context.Cause(fctx)
				return "stopped", fctx.Err()
			case <-ctx.Done():
				return "", errors.New("fn's ctx was never cancelled")
			}
		})
		done <- r
	}()
	// Kill the job's backend from outside, as a crash or a DBA would.
	pid := <-pids
	var killed bool
	require.NoError(t, admin.QueryRow(ctx, "SELECT pg_terminate_backend($1, 10000)", int64(pid)).Scan(&killed))
	require.True(t, killed)
	r := <-done
	require.ErrorIs(t, r.cause, lockstore.ErrLockLost)
	require.ErrorIs(t, r.err, lockstore.ErrLockLost)
	require.ErrorIs(t, r.err, context.Canceled)
	require.Equal(t, "stopped", r.got, "Exclusive returns what fn returned")

	// The other node takes the key at once.
	qctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	_, err := runExclusive(qctx, nodeB, key, func(context.Context, *pgx.Conn) (int, error) { return 0, nil })
	require.NoError(t, err)
}

func TestExclusiveNesting(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	dsn := pgtest.DSN(t)
	serialCounterTable(ctx, t, dsn, "x")
	pool := pgtest.Connect(t, dsn, pgtest.PoolConfig{MaxConns: 2})
	s := serialStore(t, pool)
	admin := serialAdmin(t, dsn)
	k1 := lockstore.Key{Namespace: "job", ID: "one"}
	k2 := lockstore.Key{Namespace: "job", ID: "two"}
	id2 := serialLockID(t, s, k2)

	t.Run("inside a transaction it is Serialize", func(t *testing.T) {
		_, err := runSerialize(ctx, s, k1, func(ctx context.Context, tx pgx.Tx) (int, error) {
			return runExclusive(ctx, s, k2, func(ctx context.Context, conn *pgx.Conn) (int, error) {
				require.Same(t, tx.Conn(), conn)
				require.Equal(t, byte('T'), conn.PgConn().TxStatus())
				require.True(t, serialBackendHolds(ctx, t, admin, conn.PgConn().PID(), id2))
				return 0, nil
			})
		})
		require.NoError(t, err)
	})

	t.Run("Serialize inside runs on Exclusive's connection", func(t *testing.T) {
		var order []string
		_, err := runExclusive(ctx, s, k1, func(ctx context.Context, conn *pgx.Conn) (int, error) {
			for _, k := range []lockstore.Key{k1, k2} { // the same key, then another
				_, err := runSerialize(ctx, s, k, func(ctx context.Context, tx pgx.Tx) (int, error) {
					require.Same(t, conn, tx.Conn())
					lockstore.AfterCommit(ctx, func() { order = append(order, "effect "+k.ID) })
					return increment(ctx, tx, "x")
				})
				require.NoError(t, err)
				order = append(order, "after "+k.ID)
			}
			// Each write committed by itself, visible to others now.
			require.Equal(t, 2, counterValue(ctx, t, pool, "x"))
			// Exclusive again on the same key runs at once, on the same connection.
			_, err := runExclusive(ctx, s, k1, func(ctx context.Context, inner *pgx.Conn) (int, error) {
				require.Same(t, conn, inner)
				return 0, nil
			})
			return 0, err
		})
		require.NoError(t, err)
		require.Equal(t, []string{"effect one", "after one", "effect two", "after two"}, order)
	})

	t.Run("an enclosing Exclusive's key, under another Exclusive", func(t *testing.T) {
		// Exclusive(k1) { Exclusive(k2) { Serialize(k1); Exclusive(k1) } }:
		// k1 is this call chain's already, on the outer connection. Waiting
		// for k1's node-local mutex, or for its lock from k2's connection,
		// would wait for ever on the outer call.
		nctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		_, err := runExclusive(nctx, s, k1, func(ctx context.Context, outer *pgx.Conn) (int, error) {
			return runExclusive(ctx, s, k2, func(ctx context.Context, inner *pgx.Conn) (int, error) {
				require.NotSame(t, outer, inner)
				_, err := runSerialize(ctx, s, k1, func(ctx context.Context, tx pgx.Tx) (int, error) {
					require.Same(t, outer, tx.Conn(), "k1's transaction runs on the connection holding k1")
					// Still under k2's Exclusive: k2 again runs on inner.
					return runExclusive(ctx, s, k2, func(ctx context.Context, conn *pgx.Conn) (int, error) {
						require.Same(t, outer, conn, "inside a transaction Exclusive is Serialize")
						return 0, nil
					})
				})
				if err != nil {
					return 0, err
				}
				return runExclusive(ctx, s, k1, func(ctx context.Context, conn *pgx.Conn) (int, error) {
					require.Same(t, outer, conn)
					return 0, nil
				})
			})
		})
		require.NoError(t, err)
		require.NoError(t, nctx.Err())
	})
}

func TestExclusiveStoreClose(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	s := serialStore(t, pgtest.Pool(t, pgtest.PoolConfig{MaxConns: 2}))
	key := lockstore.Key{Namespace: "job", ID: "closing"}
	entered := make(chan struct{})
	done := make(chan error, 1)
	var cause error
	go func() {
		_, err := runExclusive(ctx, s, key, func(fctx context.Context, conn *pgx.Conn) (int, error) {
			close(entered)
			<-fctx.Done()
			cause = context.Cause(fctx)
			return 0, nil
		})
		done <- err
	}()
	<-entered
	// A second caller of the key waits for this node's turn, in Go.
	waiterDone := make(chan error, 1)
	go func() {
		_, err := runExclusive(ctx, s, key, func(context.Context, *pgx.Conn) (int, error) { return 0, nil })
		waiterDone <- err
	}()
	id := serialLockID(t, s, key)
	waitFor(t, "the waiter is queued", func() bool { return serialQueued(s, id) == 2 })
	require.NoError(t, s.Close())
	require.ErrorIs(t, <-waiterDone, lockstore.ErrClosed)
	err := <-done
	require.ErrorIs(t, err, lockstore.ErrClosed)
	require.ErrorIs(t, cause, lockstore.ErrClosed)
	require.Zero(t, serialQueued(s, id), "the turn outlived the holder and the waiter")
}
