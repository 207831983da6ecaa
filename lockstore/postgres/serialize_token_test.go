package postgres

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/claimbus/claimbus/internal/pgtest"
	"github.com/claimbus/claimbus/lockstore"
	"github.com/claimbus/claimbus/lockstore/lockstoretest"
)

// serialEpoch reads the token epoch (see epoch.go) of the default schema.
func serialEpoch(ctx context.Context, t testing.TB, q interface {
	QueryRow(context.Context, string, ...any) pgx.Row
}) int64 {
	t.Helper()
	var e int64
	require.NoError(t, q.QueryRow(ctx, "SELECT epoch FROM claimbus.lock_epoch WHERE id = 1").Scan(&e))
	return e
}

func TestSerializeTokens(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	dsn := pgtest.DSN(t)
	s := serialStore(t, pgtest.Connect(t, dsn, pgtest.PoolConfig{MaxConns: 4}))
	admin := serialAdmin(t, dsn)
	k1 := lockstore.Key{Namespace: "token", ID: "one"}
	k2 := lockstore.Key{Namespace: "token", ID: "two"}

	// A Locker grant first: tokens of Serialize come from the same sequence.
	l, err := s.Lock(ctx, k1)
	require.NoError(t, err)
	last := l.Token()
	require.NoError(t, l.Release(ctx))
	// next requires a token above every earlier one, and remembers it.
	next := func(t *testing.T, tok int64) {
		t.Helper()
		require.Greater(t, tok, last, "a token did not rise")
		last = tok
	}

	t.Run("Exclusive draws one; Serialize inside reuses it for its key", func(t *testing.T) {
		_, err := runExclusive(ctx, s, k1, func(ctx context.Context, conn *pgx.Conn) (int, error) {
			tok := lockstoretest.RequireToken(t, ctx)
			next(t, tok)
			_, err := runSerialize(ctx, s, k1, func(ctx context.Context, tx pgx.Tx) (int, error) {
				require.Equal(t, tok, lockstoretest.RequireToken(t, ctx))
				return 0, nil
			})
			require.NoError(t, err)
			_, err = runSerialize(ctx, s, k2, func(ctx context.Context, tx pgx.Tx) (int, error) {
				next(t, lockstoretest.RequireToken(t, ctx))
				return 0, nil
			})
			require.NoError(t, err)
			_, err = runExclusive(ctx, s, k2, func(ctx context.Context, conn *pgx.Conn) (int, error) {
				next(t, lockstoretest.RequireToken(t, ctx))
				return runExclusive(ctx, s, k1, func(ctx context.Context, conn *pgx.Conn) (int, error) {
					require.Equal(t, tok, lockstoretest.RequireToken(t, ctx), "k1 again under k2: k1's token")
					return 0, nil
				})
			})
			return 0, err
		})
		require.NoError(t, err)
	})

	// After a crash the epoch table is empty (it is unlogged): a token
	// drawn then could be below one drawn before the crash, so Serialize
	// and Exclusive bump the epoch first.
	notLive := func(t *testing.T) int64 {
		t.Helper()
		_, err := admin.Exec(ctx, "DELETE FROM claimbus.lock_epoch_live")
		require.NoError(t, err)
		return serialEpoch(ctx, t, admin)
	}
	bumped := func(t *testing.T, before, tok int64) {
		t.Helper()
		epoch := serialEpoch(ctx, t, admin)
		require.Greater(t, epoch, before, "the epoch was not bumped")
		require.GreaterOrEqual(t, tok, epoch<<32, "the token is below the new epoch")
		next(t, tok)
	}

	t.Run("Serialize bumps an epoch that is not live", func(t *testing.T) {
		before := notLive(t)
		tok, err := runSerialize(ctx, s, k1, func(ctx context.Context, tx pgx.Tx) (int64, error) {
			return lockstoretest.RequireToken(t, ctx), nil
		})
		require.NoError(t, err)
		bumped(t, before, tok)
	})

	t.Run("nested Serialize bumps an epoch that is not live", func(t *testing.T) {
		var before int64
		_, err := runSerialize(ctx, s, k1, func(ctx context.Context, tx pgx.Tx) (int, error) {
			next(t, lockstoretest.RequireToken(t, ctx))
			before = notLive(t)
			return runSerialize(ctx, s, k2, func(ctx context.Context, tx pgx.Tx) (int, error) {
				bumped(t, before, lockstoretest.RequireToken(t, ctx))
				return 0, nil
			})
		})
		require.NoError(t, err)
	})

	t.Run("Exclusive bumps an epoch that is not live", func(t *testing.T) {
		before := notLive(t)
		tok, err := runExclusive(ctx, s, k1, func(ctx context.Context, conn *pgx.Conn) (int64, error) {
			return lockstoretest.RequireToken(t, ctx), nil
		})
		require.NoError(t, err)
		bumped(t, before, tok)
	})
}
