package postgres

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/claimbus/claimbus/internal/pgtest"
	"github.com/claimbus/claimbus/lockstore"
)

// serialCounterTable creates counter(id, n) with the rows ids, n = 0.
func serialCounterTable(ctx context.Context, t *testing.T, dsn string, ids ...string) {
	t.Helper()
	c := serialAdmin(t, dsn)
	_, err := c.Exec(ctx, "CREATE TABLE counter (id text PRIMARY KEY, n int NOT NULL)")
	require.NoError(t, err)
	for _, id := range ids {
		_, err := c.Exec(ctx, "INSERT INTO counter VALUES ($1, 0)", id)
		require.NoError(t, err)
	}
}

// increment is a read-modify-write in two statements: without the lock,
// concurrent calls lose updates (READ COMMITTED, no FOR UPDATE).
func increment(ctx context.Context, tx pgx.Tx, id string) (int, error) {
	var n int
	if err := tx.QueryRow(ctx, "SELECT n FROM counter WHERE id = $1", id).Scan(&n); err != nil {
		return 0, err
	}
	if _, err := tx.Exec(ctx, "UPDATE counter SET n = $2 WHERE id = $1", id, n+1); err != nil {
		return 0, err
	}
	return n + 1, nil
}

func counterValue(ctx context.Context, t *testing.T, q interface {
	QueryRow(context.Context, string, ...any) pgx.Row
}, id string) int {
	t.Helper()
	var n int
	require.NoError(t, q.QueryRow(ctx, "SELECT n FROM counter WHERE id = $1", id).Scan(&n))
	return n
}

func TestSerializeHotKeyHoldsOnePooledConnection(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	dsn := pgtest.DSN(t)
	serialCounterTable(ctx, t, dsn, "hot")
	pool := pgtest.Connect(t, dsn, pgtest.PoolConfig{MaxConns: 4, ApplicationName: "hot-node"})
	s := serialStore(t, pool)
	admin := serialAdmin(t, dsn)
	hot := lockstore.Key{Namespace: "lobby", ID: "hot"}
	hotID := serialLockID(t, s, hot)
	const hotCallers, otherCallers = 100, 24

	// The first hot caller holds the key until the other keys are done; the
	// 99 others queue behind it. Were they to queue on the server, each
	// would hold one of the pool's 4 connections and the other keys would
	// never get one.
	entered := make(chan struct{})
	release := make(chan struct{})
	var first atomic.Bool
	var wg sync.WaitGroup
	hotErrs := make(chan error, hotCallers)
	hotCall := func() {
		_, err := runSerialize(ctx, s, hot, func(ctx context.Context, tx pgx.Tx) (int, error) {
			// Only this node's holder is on the server for the hot key:
			// no pooled connection of the node waits there.
			var granted, waiting int
			if err := tx.QueryRow(ctx, serialLockCountSQL, int64(hotID.Namespace), int64(hotID.ID)).Scan(&granted, &waiting); err != nil {
				return 0, err
			}
			if granted != 1 || waiting != 0 {
				return 0, fmt.Errorf("hot key on the server: %d granted, %d waiting", granted, waiting)
			}
			if first.CompareAndSwap(false, true) {
				close(entered)
				select {
				case <-release:
				case <-ctx.Done():
					return 0, ctx.Err()
				}
			}
			return increment(ctx, tx, "hot")
		})
		hotErrs <- err
	}
	wg.Go(hotCall)
	<-entered
	for range hotCallers - 1 {
		wg.Go(hotCall)
	}
	waitFor(t, "every hot caller is queued", func() bool { return serialQueued(s, hotID) == hotCallers })
	require.Equal(t, int32(1), pool.Stat().AcquiredConns(), "the hot key holds more than one pooled connection")
	granted, waiting := serialLockCount(ctx, t, admin, hotID)
	require.Equal(t, 1, granted)
	require.Zero(t, waiting)

	otherCtx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	var others sync.WaitGroup
	otherErrs := make(chan error, otherCallers)
	for i := range otherCallers {
		others.Go(func() {
			key := lockstore.Key{Namespace: "lobby", ID: fmt.Sprintf("other-%d", i)}
			_, err := runSerialize(otherCtx, s, key, func(ctx context.Context, tx pgx.Tx) (int, error) {
				_, err := tx.Exec(ctx, "INSERT INTO counter VALUES ($1, 1)", key.ID)
				return 0, err
			})
			otherErrs <- err
		})
	}
	requireNoErrors(t, &others, otherErrs, "another key did not complete while the hot key was held")
	require.Equal(t, hotCallers, serialQueued(s, hotID), "the hot key moved while its holder was blocked")

	close(release)
	requireNoErrors(t, &wg, hotErrs)
	require.Equal(t, hotCallers, counterValue(ctx, t, pool, "hot"))
	var n int
	require.NoError(t, pool.QueryRow(ctx, "SELECT count(*) FROM counter WHERE id LIKE 'other-%'").Scan(&n))
	require.Equal(t, otherCallers, n)
	require.Zero(t, serialQueued(s, hotID))
}

func TestSerializeLocalQueueIsFIFO(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	s := serialStore(t, pgtest.Pool(t, pgtest.PoolConfig{MaxConns: 2}))
	key := lockstore.Key{Namespace: "fifo", ID: "k"}
	id := serialLockID(t, s, key)

	release := make(chan struct{})
	var order []int
	var mu sync.Mutex
	var wg sync.WaitGroup
	errs := make(chan error, 32)
	run := func(i int, block bool) {
		_, err := runSerialize(ctx, s, key, func(ctx context.Context, tx pgx.Tx) (struct{}, error) {
			mu.Lock()
			order = append(order, i)
			mu.Unlock()
			if block {
				<-release
			}
			return struct{}{}, nil
		})
		errs <- err
	}
	wg.Go(func() { run(0, true) })
	waitFor(t, "the first caller holds the key", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(order) == 1
	})
	const waiters = 20
	for i := 1; i <= waiters; i++ {
		wg.Go(func() { run(i, false) })
		waitFor(t, "the caller is queued", func() bool { return serialQueued(s, id) == i+1 })
	}
	close(release)
	requireNoErrors(t, &wg, errs)
	want := make([]int, waiters+1)
	for i := range want {
		want[i] = i
	}
	require.Equal(t, want, order)
}

func TestSerializeNesting(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	dsn := pgtest.DSN(t)
	var writes serialWrites
	pool := serialCountingPool(t, dsn, 4, &writes)
	s := serialStore(t, pool)
	other := serialStore(t, pgtest.Connect(t, dsn, pgtest.PoolConfig{MaxConns: 2, ApplicationName: "other-node"}))
	admin := serialAdmin(t, dsn)
	k1 := lockstore.Key{Namespace: "nest", ID: "one"}
	k2 := lockstore.Key{Namespace: "nest", ID: "two"}
	id1, id2 := serialLockID(t, s, k1), serialLockID(t, s, k2)

	t.Run("same key runs in a savepoint of the same transaction", func(t *testing.T) {
		_, err := runSerialize(ctx, s, k1, func(ctx context.Context, outer pgx.Tx) (int, error) {
			before := serialOwnWrites(t, outer.Conn())
			got, err := runSerialize(ctx, s, k1, func(ctx context.Context, inner pgx.Tx) (int, error) {
				require.Same(t, outer, inner)
				return 7, nil
			})
			require.NoError(t, err)
			require.Equal(t, 7, got)
			require.Equal(t, before+2, serialOwnWrites(t, outer.Conn()), "the same key again should cost the savepoint and its release")
			return 0, nil
		})
		require.NoError(t, err)
	})

	t.Run("other key is taken on the outer transaction until it ends", func(t *testing.T) {
		var pid uint32
		_, err := runSerialize(ctx, s, k1, func(ctx context.Context, outer pgx.Tx) (int, error) {
			pid = outer.Conn().PgConn().PID()
			before := serialOwnWrites(t, outer.Conn())
			_, err := runSerialize(ctx, s, k2, func(ctx context.Context, inner pgx.Tx) (int, error) {
				require.Same(t, outer, inner)
				return 0, nil
			})
			require.NoError(t, err)
			require.Equal(t, before+2, serialOwnWrites(t, outer.Conn()),
				"another key should cost one round trip for the savepoint, the lock and the token, and one for the release")
			// Still held after the inner call returned: released with the
			// outer transaction.
			require.True(t, serialBackendHolds(ctx, t, admin, pid, id1))
			require.True(t, serialBackendHolds(ctx, t, admin, pid, id2))
			// and another node cannot take it meanwhile.
			var got bool
			require.NoError(t, admin.QueryRow(ctx, "SELECT pg_try_advisory_lock($1, $2)", id2.Namespace, id2.ID).Scan(&got))
			require.False(t, got)
			// Same key again inside takes no lock: the savepoint and its
			// release only.
			before = serialOwnWrites(t, outer.Conn())
			_, err = runSerialize(ctx, s, k2, func(context.Context, pgx.Tx) (int, error) { return 0, nil })
			require.NoError(t, err)
			require.Equal(t, before+2, serialOwnWrites(t, outer.Conn()))
			return 0, nil
		})
		require.NoError(t, err)
		require.False(t, serialBackendHolds(ctx, t, admin, pid, id1))
		require.False(t, serialBackendHolds(ctx, t, admin, pid, id2))
	})

	t.Run("a deadline inside restores the transaction's lock_timeout", func(t *testing.T) {
		outerCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		_, err := runSerialize(outerCtx, s, k1, func(ctx context.Context, tx pgx.Tx) (int, error) {
			var outerTimeout string
			require.NoError(t, tx.QueryRow(ctx, "SHOW lock_timeout").Scan(&outerTimeout))
			require.NotEqual(t, "0", outerTimeout, "the outer deadline should set lock_timeout")
			innerCtx, cancel := context.WithTimeout(ctx, 2*time.Second)
			defer cancel()
			_, err := runSerialize(innerCtx, s, k2, func(context.Context, pgx.Tx) (int, error) { return 0, nil })
			require.NoError(t, err)
			var after string
			require.NoError(t, tx.QueryRow(ctx, "SHOW lock_timeout").Scan(&after))
			require.Equal(t, outerTimeout, after)
			return 0, nil
		})
		require.NoError(t, err)
	})

	t.Run("a nested lock_timeout leaves the outer transaction usable", func(t *testing.T) {
		holder := serialAdmin(t, dsn)
		_, err := holder.Exec(ctx, "SELECT pg_advisory_lock($1, $2)", id2.Namespace, id2.ID)
		require.NoError(t, err)
		defer func() {
			_, err := holder.Exec(ctx, "SELECT pg_advisory_unlock($1, $2)", id2.Namespace, id2.ID)
			require.NoError(t, err)
		}()
		got, err := runSerialize(ctx, s, k1, func(ctx context.Context, tx pgx.Tx) (string, error) {
			var before string
			require.NoError(t, tx.QueryRow(ctx, "SHOW lock_timeout").Scan(&before))
			innerCtx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
			defer cancel()
			_, err := runSerialize(innerCtx, s, k2, func(context.Context, pgx.Tx) (int, error) { return 0, nil })
			require.ErrorIs(t, err, lockstore.ErrTimeout)
			require.False(t, serialBackendHolds(ctx, t, admin, tx.Conn().PgConn().PID(), id2))
			// The outer fn decides: it goes on, and its transaction with it.
			var after string
			require.NoError(t, tx.QueryRow(ctx, "SHOW lock_timeout").Scan(&after), "the failed wait aborted the outer transaction")
			require.Equal(t, before, after)
			return after, nil
		})
		require.NoError(t, err)
		require.NotEmpty(t, got)
	})

	t.Run("the caller's own transaction", func(t *testing.T) {
		tx, err := pool.Begin(ctx)
		require.NoError(t, err)
		defer func() { _ = tx.Rollback(ctx) }()
		pid := tx.Conn().PgConn().PID()
		tctx, afterCommit := s.WithTx(ctx, tx)
		ran := false
		got, err := runSerialize(tctx, s, k1, func(ctx context.Context, inner pgx.Tx) (string, error) {
			require.Same(t, tx, inner)
			lockstore.AfterCommit(ctx, func() { ran = true })
			// Nested again, on another key and on the same one.
			return runSerialize(ctx, s, k2, func(ctx context.Context, tx pgx.Tx) (string, error) {
				return runSerialize(ctx, s, k1, func(ctx context.Context, tx pgx.Tx) (string, error) { return "deep", nil })
			})
		})
		require.NoError(t, err)
		require.Equal(t, "deep", got)
		require.True(t, serialBackendHolds(ctx, t, admin, pid, id1), "the lock ends with the caller's transaction")
		require.True(t, serialBackendHolds(ctx, t, admin, pid, id2))
		require.Zero(t, serialQueued(s, id1), "the caller's transaction must not take the node-local mutex")
		// A Serialize from this node without the caller's tx queues and
		// waits on the server, not on a deadlock: it completes once the
		// caller commits.
		done := make(chan error, 1)
		go func() {
			_, err := runSerialize(ctx, s, k1, func(context.Context, pgx.Tx) (int, error) { return 0, nil })
			done <- err
		}()
		waitFor(t, "the other caller waits on the server", func() bool {
			_, waiting := serialLockCount(ctx, t, admin, id1)
			return waiting == 1
		})
		require.False(t, ran, "an effect ran before the caller's commit")
		require.NoError(t, tx.Commit(ctx))
		require.False(t, ran, "effects are the caller's to run")
		afterCommit()
		require.True(t, ran)
		require.NoError(t, <-done)
	})

	t.Run("another store's transaction is not this store's", func(t *testing.T) {
		_, err := runSerialize(ctx, s, k1, func(ctx context.Context, outer pgx.Tx) (int, error) {
			return runSerialize(ctx, other, k2, func(ctx context.Context, inner pgx.Tx) (int, error) {
				require.NotSame(t, outer, inner)
				require.NotEqual(t, outer.Conn().PgConn().PID(), inner.Conn().PgConn().PID())
				return 0, nil
			})
		})
		require.NoError(t, err)
	})

	t.Run("a nil transaction attached", func(t *testing.T) {
		tctx, _ := s.WithTx(ctx, nil)
		_, err := runSerialize(tctx, s, k1, func(context.Context, pgx.Tx) (int, error) { return 0, nil })
		require.ErrorContains(t, err, "nil transaction")
	})
}

func TestSerializeAfterCommit(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	dsn := pgtest.DSN(t)
	serialCounterTable(ctx, t, dsn, "c")
	pool := pgtest.Connect(t, dsn, pgtest.PoolConfig{MaxConns: 2})
	s := serialStore(t, pool)
	key := lockstore.Key{Namespace: "effects", ID: "c"}
	id := serialLockID(t, s, key)

	t.Run("after commit and release, in order", func(t *testing.T) {
		var order []string
		_, err := runSerialize(ctx, s, key, func(ctx context.Context, tx pgx.Tx) (int, error) {
			n, err := increment(ctx, tx, "c")
			lockstore.AfterCommit(ctx, func() {
				// The write is visible from another connection, and the
				// connection and the node-local mutex are free.
				order = append(order, fmt.Sprintf("first n=%d", counterValue(ctx, t, pool, "c")))
				require.Zero(t, serialQueued(s, id))
				require.Zero(t, pool.Stat().AcquiredConns())
			})
			_, err2 := runSerialize(ctx, s, lockstore.Key{Namespace: "effects", ID: "inner"}, func(ctx context.Context, tx pgx.Tx) (int, error) {
				lockstore.AfterCommit(ctx, func() { order = append(order, "inner") })
				return 0, nil
			})
			lockstore.AfterCommit(ctx, func() { order = append(order, "last") })
			require.Empty(t, order, "an effect ran inside the transaction")
			return n, errors.Join(err, err2)
		})
		require.NoError(t, err)
		require.Equal(t, []string{"first n=1", "inner", "last"}, order)
	})

}

func TestSerializeLockTimeout(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	dsn := pgtest.DSN(t)
	pool := pgtest.Connect(t, dsn, pgtest.PoolConfig{MaxConns: 1, ApplicationName: "waiter"})
	s := serialStore(t, pool)
	key := lockstore.Key{Namespace: "timeout", ID: "k"}
	id := serialLockID(t, s, key)

	// Another node holds the key.
	holder := serialAdmin(t, dsn)
	_, err := holder.Exec(ctx, "SELECT pg_advisory_lock($1, $2)", id.Namespace, id.ID)
	require.NoError(t, err)

	pidOf := func() uint32 {
		pid, err := runSerialize(ctx, s, lockstore.Key{Namespace: "timeout", ID: "free"}, func(ctx context.Context, tx pgx.Tx) (uint32, error) {
			return tx.Conn().PgConn().PID(), nil
		})
		require.NoError(t, err)
		return pid
	}
	before := pidOf()

	// Serialize and Exclusive wait on the server alike; fn never runs.
	ran := false
	calls := []struct {
		name string
		call func(ctx context.Context) error
	}{
		{"Serialize", func(ctx context.Context) error {
			return s.Serialize(ctx, key, func(context.Context, pgx.Tx) error { ran = true; return nil })
		}},
		{"Exclusive", func(ctx context.Context) error {
			return s.Exclusive(ctx, key, func(context.Context, *pgx.Conn) error { ran = true; return nil })
		}},
	}

	t.Run("deadline becomes lock_timeout", func(t *testing.T) {
		for _, c := range calls {
			const budget = time.Second
			dctx, cancel := context.WithTimeout(ctx, budget)
			start := time.Now()
			err := c.call(dctx)
			elapsed := time.Since(start)
			require.ErrorIs(t, err, lockstore.ErrTimeout, c.name)
			require.ErrorIs(t, err, context.DeadlineExceeded, c.name)
			require.NoError(t, dctx.Err(), "%s: the server should answer before the deadline (after %v)", c.name, elapsed)
			cancel()
			if c.name == "Serialize" {
				// The connection stayed usable: the pool still has the
				// same one (Exclusive's never goes back to the pool).
				require.Equal(t, before, pidOf())
				require.Equal(t, int32(1), pool.Stat().TotalConns())
			}
		}
		require.False(t, ran)
	})

	t.Run("the server's own lock_timeout", func(t *testing.T) {
		cfg := pool.Config()
		cfg.ConnConfig.RuntimeParams["lock_timeout"] = "50"
		short := serialStore(t, serialPoolFromConfig(t, cfg))
		// No deadline: the server's lock_timeout is the only bound.
		nctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		_, err := runSerialize(nctx, short, key, func(context.Context, pgx.Tx) (int, error) { return 0, nil })
		require.ErrorIs(t, err, lockstore.ErrTimeout)
		require.NotErrorIs(t, err, context.DeadlineExceeded)
	})

	t.Run("a cancelled wait on the server", func(t *testing.T) {
		for _, c := range calls {
			cctx, cancel := context.WithCancel(ctx)
			done := make(chan error, 1)
			go func() { done <- c.call(cctx) }()
			waitFor(t, c.name+" waits on the server", func() bool {
				_, waiting := serialLockCount(ctx, t, holder, id)
				return waiting == 1
			})
			cancel()
			require.ErrorIs(t, <-done, context.Canceled, c.name)
			waitFor(t, "the cancelled wait leaves the server", func() bool {
				_, waiting := serialLockCount(ctx, t, holder, id)
				return waiting == 0
			})
			require.Zero(t, serialQueued(s, id))
		}
		require.False(t, ran)
	})

	t.Run("a cancelled wait on the node-local queue", func(t *testing.T) {
		free := lockstore.Key{Namespace: "timeout", ID: "local"}
		freeID := serialLockID(t, s, free)
		release := make(chan struct{})
		entered := make(chan struct{})
		done := make(chan error, 2)
		go func() {
			_, err := runSerialize(ctx, s, free, func(context.Context, pgx.Tx) (int, error) {
				close(entered)
				<-release
				return 0, nil
			})
			done <- err
		}()
		<-entered
		wctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
		defer cancel()
		_, err := runSerialize(wctx, s, free, func(context.Context, pgx.Tx) (int, error) { return 0, nil })
		require.ErrorIs(t, err, context.DeadlineExceeded)
		require.NotErrorIs(t, err, lockstore.ErrTimeout)
		require.Equal(t, 1, serialQueued(s, freeID), "the cancelled waiter left a trace")
		close(release)
		require.NoError(t, <-done)
	})

	_, err = holder.Exec(ctx, "SELECT pg_advisory_unlock($1, $2)", id.Namespace, id.ID)
	require.NoError(t, err)
	_, err = runSerialize(ctx, s, key, func(context.Context, pgx.Tx) (int, error) { return 0, nil })
	require.NoError(t, err)
}

func TestSerializeRollback(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	dsn := pgtest.DSN(t)
	serialCounterTable(ctx, t, dsn, "r")
	pool := pgtest.Connect(t, dsn, pgtest.PoolConfig{MaxConns: 2})
	s := serialStore(t, pool)
	key := lockstore.Key{Namespace: "rollback", ID: "r"}
	id := serialLockID(t, s, key)
	free := func(t *testing.T) {
		t.Helper()
		require.Zero(t, serialQueued(s, id), "the node-local mutex was not released")
		// A connection in doubt is destroyed, which pgxpool does in the
		// background.
		waitFor(t, "the connection is released", func() bool { return pool.Stat().AcquiredConns() == 0 })
		require.Equal(t, 0, counterValue(ctx, t, pool, "r"), "the write was committed")
	}

	t.Run("fn error", func(t *testing.T) {
		boom := errors.New("boom")
		got, err := runSerialize(ctx, s, key, func(ctx context.Context, tx pgx.Tx) (int, error) {
			n, err := increment(ctx, tx, "r")
			require.NoError(t, err)
			return n, boom
		})
		require.Same(t, boom, err, "fn's error comes back as is")
		require.Zero(t, got)
		free(t)
	})

	t.Run("fn panic", func(t *testing.T) {
		require.PanicsWithValue(t, "fn panics", func() {
			_, _ = runSerialize(ctx, s, key, func(ctx context.Context, tx pgx.Tx) (int, error) {
				_, err := increment(ctx, tx, "r")
				require.NoError(t, err)
				panic("fn panics")
			})
		})
		free(t)
	})

	t.Run("rollback error joins fn's", func(t *testing.T) {
		boom := errors.New("boom")
		_, err := runSerialize(ctx, s, key, func(ctx context.Context, tx pgx.Tx) (int, error) {
			_, err := increment(ctx, tx, "r")
			require.NoError(t, err)
			require.NoError(t, tx.Conn().Close(ctx)) // the rollback will fail
			return 0, boom
		})
		require.ErrorIs(t, err, boom)
		require.ErrorContains(t, err, "rollback")
		free(t)
	})

	t.Run("commit error is wrapped", func(t *testing.T) {
		_, err := runSerialize(ctx, s, key, func(ctx context.Context, tx pgx.Tx) (int, error) {
			_, err := increment(ctx, tx, "r")
			require.NoError(t, err)
			_, err = tx.Exec(ctx, "SELECT 1/0") // swallowed: the transaction is aborted
			require.Error(t, err)
			return 1, nil
		})
		require.ErrorIs(t, err, pgx.ErrTxCommitRollback)
		require.ErrorContains(t, err, "commit")
		free(t)
	})

	t.Run("ctx done before commit", func(t *testing.T) {
		cctx, cancel := context.WithCancel(ctx)
		_, err := runSerialize(cctx, s, key, func(ctx context.Context, tx pgx.Tx) (int, error) {
			n, err := increment(ctx, tx, "r")
			cancel()
			return n, err
		})
		require.ErrorIs(t, err, context.Canceled)
		free(t)
	})
}

func TestSerializeBadInput(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	pool := pgtest.Pool(t, pgtest.PoolConfig{MaxConns: 2})
	s := serialStore(t, pool)
	nop := func(context.Context, pgx.Tx) (int, error) { return 0, nil }
	good := lockstore.Key{Namespace: "bad", ID: "input"}

	_, err := runSerialize[int](ctx, s, good, nil)
	require.ErrorContains(t, err, "nil fn")
	_, err = runSerialize(ctx, nil, good, nop)
	require.ErrorContains(t, err, "nil *Store")
	_, err = runExclusive[int](ctx, s, good, nil)
	require.ErrorContains(t, err, "nil fn")
	require.Zero(t, pool.Stat().AcquiredConns())
}

func TestSerializeClosedStore(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	pool := pgtest.Pool(t, pgtest.PoolConfig{MaxConns: 2})
	s := serialStore(t, pool)
	key := lockstore.Key{Namespace: "closed", ID: "k"}

	// A waiter on the node-local queue fails when the store closes.
	entered := make(chan struct{})
	release := make(chan struct{})
	holderDone := make(chan error, 1)
	go func() {
		_, err := runSerialize(ctx, s, key, func(context.Context, pgx.Tx) (int, error) {
			close(entered)
			<-release
			return 0, nil
		})
		holderDone <- err
	}()
	<-entered
	waiterDone := make(chan error, 1)
	go func() {
		_, err := runSerialize(ctx, s, key, func(context.Context, pgx.Tx) (int, error) { return 0, nil })
		waiterDone <- err
	}()
	id := serialLockID(t, s, key)
	waitFor(t, "the waiter is queued", func() bool { return serialQueued(s, id) == 2 })
	require.NoError(t, s.Close())
	require.ErrorIs(t, <-waiterDone, lockstore.ErrClosed)
	close(release)
	// The holder's fn ignored its ctx past Close's Timeout: its transaction
	// was ended by Close, never committed.
	require.ErrorIs(t, <-holderDone, lockstore.ErrClosed)
}

func TestSerializeRoundTrips(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	var writes serialWrites
	pool := serialCountingPool(t, pgtest.DSN(t), 1, &writes)
	s := serialStore(t, pool)
	key := lockstore.Key{Namespace: "rt", ID: "k"}
	id := serialLockID(t, s, key)
	nop := func(context.Context, pgx.Tx) (int, error) { return 0, nil }
	measure := func(op func() error) int64 {
		require.NoError(t, op()) // warm: connection made, statements cached
		before := serialConnWrites(ctx, t, pool)
		require.NoError(t, op())
		return serialConnWrites(ctx, t, pool) - before
	}

	serialize := measure(func() error { _, err := runSerialize(ctx, s, key, nop); return err })
	dctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	withDeadline := measure(func() error { _, err := runSerialize(dctx, s, key, nop); return err })
	naive := measure(func() error { return naiveSerialize(ctx, pool, id) })
	t.Logf("round trips per op: Serialize %d (with deadline %d), naive %d", serialize, withDeadline, naive)
	require.Equal(t, int64(2), serialize)
	require.Equal(t, int64(2), withDeadline)
	require.Equal(t, int64(3), naive)
}

// naiveSerialize is the form Serialize improves on: Begin, SELECT
// pg_advisory_xact_lock, Commit, three round trips.
func naiveSerialize(ctx context.Context, pool interface {
	Begin(context.Context) (pgx.Tx, error)
}, id LockID) error {
	tx, err := pool.Begin(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock($1, $2)", id.Namespace, id.ID); err != nil {
		return err
	}
	return tx.Commit(ctx)
}

// Serialize and Exclusive queue apart from the Locker: one queue would
// make a Locker holder that calls Serialize on its key wait for itself.
func TestSerializeQueueIsNotTheLockers(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	s := serialStore(t, pgtest.Pool(t, pgtest.PoolConfig{MaxConns: 2}))
	key := lockstore.Key{Namespace: "job", ID: "queues"}
	id := serialLockID(t, s, key)

	l, err := s.Lock(ctx, key)
	require.NoError(t, err)
	require.Equal(t, 1, queuedWithHolder(s.queue, id))
	require.Zero(t, serialQueued(s, id), "the Locker's turn is in Serialize's queue")
	require.NoError(t, l.Release(ctx))

	_, err = runSerialize(ctx, s, key, func(context.Context, pgx.Tx) (int, error) {
		require.Equal(t, 1, serialQueued(s, id))
		require.Zero(t, queuedWithHolder(s.queue, id), "Serialize's turn is in the Locker's queue")
		return 0, nil
	})
	require.NoError(t, err)
	require.Zero(t, serialQueued(s, id))
}
