package postgres

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/claimbus/claimbus/internal/pgtest"
	"github.com/claimbus/claimbus/lockstore"
)

// TestTokensRiseAcrossCrashRestarts: tokens per key strictly increase
// across 10 immediate shutdowns (crash recovery at each start) of a server
// running with synchronous_commit = off, where the token sequence alone
// goes back.
func TestTokensRiseAcrossCrashRestarts(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	cluster := pgtest.NewClusterWith(t, pgtest.ClusterConfig{Settings: map[string]string{"synchronous_commit": "off"}})
	pool := pgtest.Connect(t, cluster.DSN(), pgtest.PoolConfig{MaxConns: 2, ApplicationName: "crash"})
	s := newTestStore(t, pool, Config{ReconnectBackoff: 20 * time.Millisecond, PollInterval: time.Millisecond})
	key := lockstore.Key{Namespace: "crash", ID: "1"}
	var last int64
	for round := range 10 {
		// Many grants since the last bump, so that the sequence's WAL lags.
		for range 200 {
			lctx, cancel := context.WithTimeout(ctx, 20*time.Second)
			l, err := lockWhenUp(lctx, s, key)
			cancel()
			require.NoError(t, err, "round %d", round)
			require.Greater(t, l.Token(), last, "round %d: token went back", round)
			last = l.Token()
			require.NoError(t, l.Release(ctx))
		}
		require.NoError(t, cluster.CrashRestart(ctx))
	}
}

// lockWhenUp takes key, waiting while the store reconnects.
func lockWhenUp(ctx context.Context, s *Store, key lockstore.Key) (lockstore.Lock, error) {
	for {
		l, err := s.Lock(ctx, key)
		if !errors.Is(err, lockstore.ErrUnavailable) {
			return l, err
		}
		select {
		case <-ctx.Done():
			return nil, err
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// TestTokensRiseAcrossStoreRestarts: a Store closed and made again on the
// same database (a node restarted) grants tokens above the old one's, per
// key, and so does another node's Store made later.
func TestTokensRiseAcrossStoreRestarts(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	dsn := pgtest.DSN(t)
	key := lockstore.Key{Namespace: "restart", ID: "1"}
	var last int64
	for round := range 3 {
		pool := pgtest.Connect(t, dsn, pgtest.PoolConfig{MaxConns: 2})
		s, err := New(ctx, pool, Config{})
		require.NoError(t, err)
		for range 5 {
			l, err := s.TryLock(ctx, key)
			require.NoError(t, err)
			require.Greater(t, l.Token(), last, "round %d: token went back", round)
			last = l.Token()
			require.NoError(t, l.Release(ctx))
		}
		require.NoError(t, s.Close())
	}
}
