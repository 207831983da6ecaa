package idempotency_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/claimbus/claimbus/bus"
	"github.com/claimbus/claimbus/internal/pgtest"
	"github.com/claimbus/claimbus/lockstore/postgres"
	"github.com/claimbus/claimbus/middleware"
)

// pgNodes returns n in-process buses, each with its own pool and
// PostgreSQL lock store on one database, sharing e's Store (the memory
// one: a shared outcome store), with front before the middleware.
func pgNodes(t *testing.T, e *env, n int, front *counter) []*bus.Bus {
	t.Helper()
	dsn := pgtest.DSN(t)
	var buses []*bus.Bus
	for i := range n {
		pool := pgtest.Connect(t, dsn, pgtest.PoolConfig{MaxConns: 8, ApplicationName: "node-" + string(rune('a'+i))})
		store, err := postgres.New(context.Background(), pool, postgres.Config{})
		require.NoError(t, err)
		t.Cleanup(func() { require.NoError(t, store.Close()) })
		cfg := e.config()
		cfg.Locker = store
		buses = append(buses, e.node(bus.Config{}, front, e.middleware(cfg)))
	}
	return buses
}

// 100 concurrent repeats over two nodes, whose only link is the
// database's advisory locks (and the shared outcome store), run the
// handler once.
func TestConcurrentRepeatsOverTwoNodesOnPostgres(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	front := &counter{}
	repeatStorm(t, e, 100, front, pgNodes(t, e, 2, front)...)
}

// A differing payload is rejected, and a failed first run is retried, on
// either node.
func TestConflictAndRetryOverTwoNodesOnPostgres(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.gate = func(_ context.Context, c *Pay) error {
		if c.Key == "retry" && e.runs.Load() == 2 {
			return middleware.ErrUnavailable
		}
		return nil
	}
	nodes := pgNodes(t, e, 2, &counter{})
	first, err := pay(t, nodes[0], Pay{Key: "conflict", Amount: 5})
	require.NoError(t, err)
	_, err = pay(t, nodes[1], Pay{Key: "conflict", Amount: 6})
	require.ErrorIs(t, err, middleware.ErrIdempotencyConflict)
	again, err := pay(t, nodes[1], Pay{Key: "conflict", Amount: 5})
	require.NoError(t, err)
	require.Equal(t, first, again)

	_, err = pay(t, nodes[0], Pay{Key: "retry", Amount: 1})
	require.ErrorIs(t, err, middleware.ErrUnavailable)
	retry, err := pay(t, nodes[1], Pay{Key: "retry", Amount: 1})
	require.NoError(t, err)
	require.Equal(t, Receipt{Amount: 1, Run: 3}, retry)
	require.EqualValues(t, 3, e.runs.Load())
}
