package sqlite_test

import (
	"context"
	"database/sql"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/claimbus/claimbus/lockstore"
	"github.com/claimbus/claimbus/lockstore/lockstoretest"
	"github.com/claimbus/claimbus/lockstore/sqlite"
)

func serializeToken(t *testing.T, ctx context.Context, s *sqlite.Store, k lockstore.Key) int64 {
	t.Helper()
	tok, err := sqlite.SerializeValue(ctx, s, k, func(ctx context.Context, tx *sql.Tx) (int64, error) {
		return lockstoretest.RequireToken(t, ctx), nil
	})
	require.NoError(t, err)
	return tok
}

func TestTokens(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	s, _ := counterStore(t)
	var last int64
	next := func(t *testing.T, tok int64) {
		t.Helper()
		require.Greater(t, tok, last, "a token did not rise")
		last = tok
	}

	for range 3 {
		next(t, serializeToken(t, ctx, s, key("a")))
	}
	_, err := sqlite.SerializeValue(ctx, s, key("a"), func(ctx context.Context, tx *sql.Tx) (int, error) {
		outer := lockstoretest.RequireToken(t, ctx)
		next(t, outer)
		_, err := sqlite.SerializeValue(ctx, s, key("b"), func(ctx context.Context, tx *sql.Tx) (int, error) {
			inner := lockstoretest.RequireToken(t, ctx)
			next(t, inner)
			_, err := sqlite.SerializeValue(ctx, s, key("a"), func(ctx context.Context, tx *sql.Tx) (int, error) {
				require.Equal(t, outer, lockstoretest.RequireToken(t, ctx), "the same key again: its token")
				return 0, nil
			})
			require.NoError(t, err)
			return sqlite.SerializeValue(ctx, s, key("b"), func(ctx context.Context, tx *sql.Tx) (int, error) {
				require.Equal(t, inner, lockstoretest.RequireToken(t, ctx))
				return 0, nil
			})
		})
		require.NoError(t, err)
		require.Equal(t, outer, lockstoretest.RequireToken(t, ctx))
		return 0, nil
	})
	require.NoError(t, err)

	_, err = sqlite.ExclusiveValue(ctx, s, key("a"), func(ctx context.Context, q sqlite.Querier) (int, error) {
		tok := lockstoretest.RequireToken(t, ctx)
		next(t, tok)
		_, err := sqlite.SerializeValue(ctx, s, key("a"), func(ctx context.Context, tx *sql.Tx) (int, error) {
			require.Equal(t, tok, lockstoretest.RequireToken(t, ctx), "Serialize inside Exclusive on its key: Exclusive's token")
			return 0, nil
		})
		require.NoError(t, err)
		_, err = sqlite.ExclusiveValue(ctx, s, key("b"), func(ctx context.Context, q sqlite.Querier) (int, error) {
			next(t, lockstoretest.RequireToken(t, ctx))
			return sqlite.ExclusiveValue(ctx, s, key("a"), func(ctx context.Context, q sqlite.Querier) (int, error) {
				require.Equal(t, tok, lockstoretest.RequireToken(t, ctx), "Exclusive again on its key under another: its token")
				return 0, nil
			})
		})
		return 0, err
	})
	require.NoError(t, err)
}

// Tokens rise across restarts of the store on one file, and across the
// reservations of token blocks within a run.
func TestTokensRiseAcrossRestarts(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	db, _ := newDB(t)
	var last int64
	for run := range 3 {
		s, err := sqlite.New(ctx, db, sqlite.Config{})
		require.NoError(t, err)
		if run == 1 {
			// Reservations of 4 tokens: several within the run.
			sqlite.ShrinkTokenBlock(s, 4)
		}
		for i := range 10 {
			var tok int64
			if i%2 == 0 {
				tok = serializeToken(t, ctx, s, key("r"))
			} else {
				tok, err = sqlite.ExclusiveValue(ctx, s, key("r"), func(ctx context.Context, q sqlite.Querier) (int64, error) {
					return lockstoretest.RequireToken(t, ctx), nil
				})
				require.NoError(t, err)
			}
			require.Greater(t, tok, last, "run %d, call %d", run, i)
			last = tok
		}
		require.NoError(t, s.Close())
		var mark int64
		require.NoError(t, db.QueryRow("SELECT next FROM claimbus_token WHERE id = 1").Scan(&mark))
		require.Greater(t, mark, last, "a token was handed out above the durable mark")
	}
}
