package postgres_test

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/claimbus/claimbus/claimstore"
	"github.com/claimbus/claimbus/claimstore/postgres"
	"github.com/claimbus/claimbus/lockstore"
)

// A store whose server cannot be reached fails with ErrUnavailable, which
// callers can tell from a refusal.
func TestUnreachableServerIsUnavailable(t *testing.T) {
	t.Parallel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	require.NoError(t, l.Close()) // nothing listens there now
	pool, err := pgxpool.New(context.Background(), "postgres://nobody@"+addr+"/none?connect_timeout=5")
	require.NoError(t, err)
	defer pool.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err = postgres.New(ctx, pool, postgres.Config{})
	require.ErrorIs(t, err, claimstore.ErrUnavailable)
	require.ErrorIs(t, err, lockstore.ErrUnavailable)
}
