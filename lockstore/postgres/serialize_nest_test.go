package postgres

import (
	"context"
	"errors"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/claimbus/claimbus/internal/pgtest"
	"github.com/claimbus/claimbus/lockstore"
)

// A nested Serialize whose fn fails rolls back to its savepoint: its rows
// and the effects registered inside it (nested calls included) are gone,
// whatever the outer fn then does; the outer transaction goes on and
// commits its own.
func TestSerializeNestedErrorRollsBackToItsSavepoint(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	dsn := pgtest.DSN(t)
	serialCounterTable(ctx, t, dsn, "outer", "inner", "deep", "later")
	pool := pgtest.Connect(t, dsn, pgtest.PoolConfig{MaxConns: 4})
	s := serialStore(t, pool)
	admin := serialAdmin(t, dsn)
	k1 := lockstore.Key{Namespace: "nest", ID: "outer"}
	k2 := lockstore.Key{Namespace: "nest", ID: "inner"}
	k3 := lockstore.Key{Namespace: "nest", ID: "deep"}
	id2 := serialLockID(t, s, k2)
	id3 := serialLockID(t, s, k3)
	boom := errors.New("inner fails")

	t.Run("fn error", func(t *testing.T) {
		var ran []string
		effect := func(what string) func() { return func() { ran = append(ran, what) } }
		_, err := runSerialize(ctx, s, k1, func(ctx context.Context, tx pgx.Tx) (int, error) {
			_, err := increment(ctx, tx, "outer")
			require.NoError(t, err)
			lockstore.AfterCommit(ctx, effect("outer"))

			_, err = runSerialize(ctx, s, k2, func(ctx context.Context, tx pgx.Tx) (int, error) {
				_, err := increment(ctx, tx, "inner")
				require.NoError(t, err)
				lockstore.AfterCommit(ctx, effect("inner"))
				// A deeper call succeeds, inside the one that fails: it goes
				// with it.
				_, err = runSerialize(ctx, s, k3, func(ctx context.Context, tx pgx.Tx) (int, error) {
					lockstore.AfterCommit(ctx, effect("deep"))
					return increment(ctx, tx, "deep")
				})
				require.NoError(t, err)
				return 0, boom
			})
			require.ErrorIs(t, err, boom)

			// The same key as the outer call: its savepoint too.
			_, err = runSerialize(ctx, s, k1, func(ctx context.Context, tx pgx.Tx) (int, error) {
				_, err := increment(ctx, tx, "outer")
				require.NoError(t, err)
				lockstore.AfterCommit(ctx, effect("same key"))
				return 0, boom
			})
			require.ErrorIs(t, err, boom)

			// An error on the server inside the nested fn aborts only its
			// savepoint.
			_, err = runSerialize(ctx, s, k2, func(ctx context.Context, tx pgx.Tx) (int, error) {
				_, err := tx.Exec(ctx, "SELECT 1/0")
				return 0, err
			})
			require.Error(t, err)

			// The outer transaction is usable and sees none of it.
			require.Equal(t, 1, counterValue(ctx, t, tx, "outer"))
			require.Zero(t, counterValue(ctx, t, tx, "inner"))
			require.Zero(t, counterValue(ctx, t, tx, "deep"))
			// k2's lock went with the savepoint it was taken in: another
			// node may take it now, and a later nested call takes it again.
			var got bool
			require.NoError(t, admin.QueryRow(ctx, "SELECT pg_try_advisory_lock($1, $2)", id2.Namespace, id2.ID).Scan(&got))
			require.True(t, got, "k2 is still held after its savepoint rolled back")
			require.NoError(t, admin.QueryRow(ctx, "SELECT pg_advisory_unlock($1, $2)", id2.Namespace, id2.ID).Scan(&got))
			_, err = runSerialize(ctx, s, k2, func(ctx context.Context, tx pgx.Tx) (int, error) {
				require.True(t, serialBackendHolds(ctx, t, admin, tx.Conn().PgConn().PID(), id2))
				lockstore.AfterCommit(ctx, effect("later"))
				return increment(ctx, tx, "later")
			})
			require.NoError(t, err)
			// So did k3's, which the deeper call had released into k2's
			// savepoint: the transaction takes it again when asked.
			require.NoError(t, admin.QueryRow(ctx, "SELECT pg_try_advisory_lock($1, $2)", id3.Namespace, id3.ID).Scan(&got))
			require.True(t, got, "k3 is still held after the savepoint it was released into rolled back")
			require.NoError(t, admin.QueryRow(ctx, "SELECT pg_advisory_unlock($1, $2)", id3.Namespace, id3.ID).Scan(&got))
			_, err = runSerialize(ctx, s, k3, func(ctx context.Context, tx pgx.Tx) (int, error) {
				require.True(t, serialBackendHolds(ctx, t, admin, tx.Conn().PgConn().PID(), id3), "k3 taken again")
				return 0, nil
			})
			require.NoError(t, err)
			require.Empty(t, ran)
			return 0, nil // the inner errors are swallowed
		})
		require.NoError(t, err)
		require.Equal(t, []string{"outer", "later"}, ran)
		require.Equal(t, 1, counterValue(ctx, t, pool, "outer"))
		require.Zero(t, counterValue(ctx, t, pool, "inner"), "the failed inner call's rows committed")
		require.Zero(t, counterValue(ctx, t, pool, "deep"))
		require.Equal(t, 1, counterValue(ctx, t, pool, "later"))
	})

	t.Run("fn swallows a server error", func(t *testing.T) {
		_, err := runSerialize(ctx, s, k1, func(ctx context.Context, tx pgx.Tx) (int, error) {
			_, err := runSerialize(ctx, s, k2, func(ctx context.Context, tx pgx.Tx) (int, error) {
				_, err := increment(ctx, tx, "inner")
				require.NoError(t, err)
				_, err = tx.Exec(ctx, "SELECT 1/0")
				require.Error(t, err)
				return 0, nil // its savepoint is aborted all the same
			})
			require.ErrorContains(t, err, "release the savepoint")
			return increment(ctx, tx, "outer")
		})
		require.NoError(t, err)
		require.Equal(t, 2, counterValue(ctx, t, pool, "outer"))
		require.Zero(t, counterValue(ctx, t, pool, "inner"))
	})

}
