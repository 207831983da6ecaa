package sqlite_test

import (
	"context"
	"database/sql"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/claimbus/claimbus/lockstore"
	"github.com/claimbus/claimbus/lockstore/sqlite"
)

// counterStore is a store on a fresh database with a counter table.
func counterStore(t testing.TB) (*sqlite.Store, *sql.DB) {
	t.Helper()
	db, _ := newDB(t)
	_, err := db.Exec("CREATE TABLE counter (name TEXT PRIMARY KEY, n INTEGER NOT NULL)")
	require.NoError(t, err)
	return newStore(t, db, sqlite.Config{}), db
}

func count(t *testing.T, db *sql.DB, name string) int {
	t.Helper()
	var n int
	err := db.QueryRow("SELECT n FROM counter WHERE name = ?", name).Scan(&n)
	if errors.Is(err, sql.ErrNoRows) {
		return 0
	}
	require.NoError(t, err)
	return n
}

// increment is a read-modify-write in two statements, in a transaction or
// (q a *sql.DB) autocommitted one by one: it loses updates unless calls for
// one name are serialized.
func increment(ctx context.Context, q sqlite.Querier, name string) (int, error) {
	var n int
	err := q.QueryRowContext(ctx, "SELECT n FROM counter WHERE name = ?", name).Scan(&n)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return 0, err
	}
	n++
	_, err = q.ExecContext(ctx, "INSERT INTO counter (name, n) VALUES (?, ?) ON CONFLICT (name) DO UPDATE SET n = excluded.n", name, n)
	return n, err
}

func key(id string) lockstore.Key { return lockstore.Key{Namespace: "counter", ID: id} }

func TestSerializeMutualExclusion(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	s, db := counterStore(t)
	const goroutines, rounds = 32, 25
	names := []string{"hot", "a", "b"} // one hot key, and two others beside it
	var inside [3]atomic.Int32
	var overlaps atomic.Int32
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			for r := range rounds {
				i := 0
				if (g+r)%4 == 0 {
					i = 1 + (g+r)%2
				}
				work := func(ctx context.Context, q sqlite.Querier) (int, error) {
					if inside[i].Add(1) != 1 {
						overlaps.Add(1)
					}
					defer inside[i].Add(-1)
					return increment(ctx, q, names[i])
				}
				var err error
				if g%2 == 0 {
					_, err = sqlite.SerializeValue(ctx, s, key(names[i]), func(ctx context.Context, tx *sql.Tx) (int, error) {
						return work(ctx, tx)
					})
				} else {
					// No transaction: the read and the write commit one by
					// one, and only the key's lock keeps others out between.
					_, err = sqlite.ExclusiveValue(ctx, s, key(names[i]), work)
				}
				if err != nil {
					t.Error(err) // not require: FailNow must run on the test's goroutine
					return
				}
			}
		})
	}
	wg.Wait()
	require.Zero(t, overlaps.Load(), "two fns ran at once for one key")
	total := 0
	for _, name := range names {
		total += count(t, db, name)
	}
	require.Equal(t, goroutines*rounds, total)
	require.Equal(t, goroutines*rounds*3/4, count(t, db, "hot"))
	held, err := s.Held(ctx)
	require.NoError(t, err)
	require.Empty(t, held, "a lock outlived its Serialize")
}

func TestSerializeReturnsAndRollsBack(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	s, db := counterStore(t)

	n, err := sqlite.SerializeValue(ctx, s, key("x"), func(ctx context.Context, tx *sql.Tx) (int, error) {
		return increment(ctx, tx, "x")
	})
	require.NoError(t, err)
	require.Equal(t, 1, n)

	// On error the value is T's zero (the rollback is RunTx's).
	n, err = sqlite.SerializeValue(ctx, s, key("x"), func(ctx context.Context, tx *sql.Tx) (int, error) {
		v, err := increment(ctx, tx, "x")
		require.NoError(t, err)
		return v, errors.New("boom")
	})
	require.Error(t, err)
	require.Zero(t, n)
	require.Equal(t, 1, count(t, db, "x"), "a failed fn's write was committed")

	// A commit that fails comes back wrapped: fn ended the transaction.
	_, err = sqlite.SerializeValue(ctx, s, key("x"), func(ctx context.Context, tx *sql.Tx) (int, error) {
		return 0, tx.Rollback()
	})
	require.ErrorIs(t, err, sql.ErrTxDone)
	require.ErrorContains(t, err, "commit")

	// The lock is free after each of them.
	l, err := s.TryLock(ctx, key("x"))
	require.NoError(t, err)
	require.NoError(t, l.Release(ctx))
}

func TestSerializeNesting(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	s, db := counterStore(t)

	t.Run("same and other keys join the outer transaction", func(t *testing.T) {
		n, err := sqlite.SerializeValue(ctx, s, key("n1"), func(ctx context.Context, outer *sql.Tx) (int, error) {
			if _, err := increment(ctx, outer, "n1"); err != nil {
				return 0, err
			}
			same, err := sqlite.SerializeValue(ctx, s, key("n1"), func(ctx context.Context, tx *sql.Tx) (int, error) {
				require.Same(t, outer, tx)
				return increment(ctx, tx, "n1")
			})
			require.NoError(t, err)
			require.Equal(t, 2, same)
			_, err = sqlite.SerializeValue(ctx, s, key("n2"), func(ctx context.Context, tx *sql.Tx) (int, error) {
				require.Same(t, outer, tx)
				return increment(ctx, tx, "n2")
			})
			require.NoError(t, err)
			_, err = sqlite.ExclusiveValue(ctx, s, key("n3"), func(ctx context.Context, q sqlite.Querier) (int, error) {
				require.Same(t, outer, q, "Exclusive inside a transaction is Serialize")
				return 0, nil
			})
			require.NoError(t, err)
			// Inner calls took no lock: only the outer one is held.
			held, err := s.Held(ctx)
			require.NoError(t, err)
			require.Len(t, held, 1)
			require.Equal(t, key("n1"), held[0].Key)
			return same, nil
		})
		require.NoError(t, err)
		require.Equal(t, 2, n)
		require.Equal(t, 2, count(t, db, "n1"))
		require.Equal(t, 1, count(t, db, "n2"))
	})

	t.Run("inside Exclusive on the same key", func(t *testing.T) {
		_, err := sqlite.ExclusiveValue(ctx, s, key("e"), func(ctx context.Context, q sqlite.Querier) (int, error) {
			require.Same(t, db, q, "outside a transaction Exclusive hands out the *sql.DB")
			_, err := sqlite.ExclusiveValue(ctx, s, key("e"), func(ctx context.Context, q sqlite.Querier) (int, error) {
				return 0, nil
			})
			require.NoError(t, err)
			n, err := sqlite.SerializeValue(ctx, s, key("e"), func(ctx context.Context, tx *sql.Tx) (int, error) {
				return increment(ctx, tx, "e")
			})
			require.NoError(t, err)
			require.Equal(t, 1, n)
			// That transaction has committed; the key is still held.
			require.Equal(t, 1, count(t, db, "e"))
			_, err = s.TryLock(ctx, key("e"))
			require.ErrorIs(t, err, lockstore.ErrLocked)
			return 0, nil
		})
		require.NoError(t, err)
		l, err := s.TryLock(ctx, key("e"))
		require.NoError(t, err)
		require.NoError(t, l.Release(ctx))
	})

	t.Run("another store's transaction is not joined", func(t *testing.T) {
		s2, db2 := counterStore(t)
		_, err := sqlite.SerializeValue(ctx, s, key("o"), func(ctx context.Context, outer *sql.Tx) (int, error) {
			return sqlite.SerializeValue(ctx, s2, key("o"), func(ctx context.Context, tx *sql.Tx) (int, error) {
				require.NotSame(t, outer, tx)
				return increment(ctx, tx, "o")
			})
		})
		require.NoError(t, err)
		require.Equal(t, 1, count(t, db2, "o"))
		require.Zero(t, count(t, db, "o"))
	})
}

func TestWithTx(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	s, db := counterStore(t)
	tx, err := db.BeginTx(ctx, nil)
	require.NoError(t, err)
	defer tx.Rollback()
	tctx, _ := s.WithTx(ctx, tx)
	_, err = sqlite.SerializeValue(tctx, s, key("w"), func(ctx context.Context, got *sql.Tx) (int, error) {
		return increment(ctx, got, "w")
	})
	require.NoError(t, err)
	held, err := s.Held(ctx)
	require.NoError(t, err)
	require.Empty(t, held, "Serialize in the caller's transaction took a lock")
	require.NoError(t, tx.Commit())
	require.Equal(t, 1, count(t, db, "w"))
}

func TestSerializeDeadlineWhileWaiting(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	s, db := counterStore(t)

	t.Run("for the key", func(t *testing.T) {
		l, err := s.Lock(ctx, key("d"))
		require.NoError(t, err)
		defer l.Release(ctx)
		dctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
		defer cancel()
		called := false
		_, err = sqlite.SerializeValue(dctx, s, key("d"), func(ctx context.Context, tx *sql.Tx) (int, error) {
			called = true
			return 0, nil
		})
		require.ErrorIs(t, err, context.DeadlineExceeded)
		require.False(t, called)
		require.Zero(t, s.Waiting(key("d")), "the timed-out waiter stayed queued")

		_, err = sqlite.ExclusiveValue(dctx, s, key("d"), func(ctx context.Context, q sqlite.Querier) (int, error) {
			called = true
			return 0, nil
		})
		require.ErrorIs(t, err, context.DeadlineExceeded)
		require.False(t, called)
	})

	// Another connection (outside the store) holds SQLite's write lock.
	writeLocked := func(t *testing.T, db *sql.DB) {
		conn, err := db.Conn(ctx)
		require.NoError(t, err)
		tx, err := conn.BeginTx(ctx, nil) // IMMEDIATE: takes the write lock
		require.NoError(t, err)
		t.Cleanup(func() {
			require.NoError(t, tx.Rollback())
			require.NoError(t, conn.Close())
		})
	}

	t.Run("for the write lock, by ctx", func(t *testing.T) {
		writeLocked(t, db)
		dctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
		defer cancel()
		_, err := sqlite.SerializeValue(dctx, s, key("w"), func(ctx context.Context, tx *sql.Tx) (int, error) {
			t.Error("fn ran without the write lock")
			return 0, nil
		})
		require.ErrorIs(t, err, context.DeadlineExceeded)
		l, err := s.TryLock(ctx, key("w"))
		require.NoError(t, err, "the key stayed locked after a failed begin")
		require.NoError(t, l.Release(ctx))
	})

	t.Run("for the write lock, by the busy timeout", func(t *testing.T) {
		_, path := newDB(t)
		short := openDB(t, testDSN(path, 50*time.Millisecond))
		s := newStore(t, short, sqlite.Config{})
		writeLocked(t, short)
		_, err := sqlite.SerializeValue(ctx, s, key("w"), func(ctx context.Context, tx *sql.Tx) (int, error) {
			t.Error("fn ran without the write lock")
			return 0, nil
		})
		require.ErrorIs(t, err, lockstore.ErrTimeout)
		require.ErrorContains(t, err, "busy")
	})
}

func TestStoreEndsTheLockDuringFn(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)

	t.Run("Exclusive cancels fn's ctx", func(t *testing.T) {
		s, _ := counterStore(t)
		_, err := sqlite.ExclusiveValue(ctx, s, key("l"), func(ctx context.Context, q sqlite.Querier) (int, error) {
			require.NoError(t, s.Close())
			<-ctx.Done()
			require.ErrorIs(t, context.Cause(ctx), lockstore.ErrLockLost)
			return 0, ctx.Err()
		})
		require.ErrorIs(t, err, lockstore.ErrLockLost)
		require.ErrorIs(t, err, context.Canceled)
	})
}

func TestBadInput(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	s, _ := counterStore(t)
	fn := func(ctx context.Context, tx *sql.Tx) (int, error) { return 0, nil }
	xfn := func(ctx context.Context, q sqlite.Querier) (int, error) { return 0, nil }

	_, err := sqlite.SerializeValue(ctx, nil, key("k"), fn)
	require.ErrorContains(t, err, "nil *Store")
	_, err = sqlite.SerializeValue[int](ctx, s, key("k"), nil)
	require.ErrorContains(t, err, "nil fn")
	_, err = sqlite.ExclusiveValue(ctx, nil, key("k"), xfn)
	require.ErrorContains(t, err, "nil *Store")
	_, err = sqlite.ExclusiveValue[int](ctx, s, key("k"), nil)
	require.ErrorContains(t, err, "nil fn")
}

// Not parallel: it checks that no goroutine outlives the call, which other
// tests running beside it would blur.
func TestExclusivePanicLeavesNoGoroutine(t *testing.T) {
	ctx := ctxT(t)
	s, _ := counterStore(t)
	ignore := goleak.IgnoreCurrent()
	require.PanicsWithValue(t, "kaput", func() {
		_, _ = sqlite.ExclusiveValue(ctx, s, key("xp"), func(ctx context.Context, q sqlite.Querier) (int, error) {
			panic("kaput")
		})
	})
	goleak.VerifyNone(t, ignore)
	l, err := s.TryLock(ctx, key("xp"))
	require.NoError(t, err, "the lock outlived the panic")
	require.NoError(t, l.Release(ctx))
}
