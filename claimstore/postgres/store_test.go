package postgres_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/claimbus/claimbus/claimstore"
	"github.com/claimbus/claimbus/claimstore/claimstoretest"
	"github.com/claimbus/claimbus/claimstore/postgres"
	"github.com/claimbus/claimbus/internal/pgtest"
)

func newStore(t testing.TB, dsn string, cfg postgres.Config) claimstore.Store {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := postgres.New(ctx, pgtest.Connect(t, dsn, pgtest.PoolConfig{MaxConns: benchPoolConns}), cfg)
	require.NoError(t, err)
	return s
}

func TestConformance(t *testing.T) {
	t.Parallel()
	dsn := pgtest.DSN(t)
	claimstoretest.Run(t, func(t *testing.T) claimstore.Store { return newStore(t, dsn, postgres.Config{}) })
}
