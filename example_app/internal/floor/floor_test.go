package floor_test

import (
	"context"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/claimbus/claimbus/example_app/internal/floor"
	"github.com/claimbus/claimbus/example_app/internal/storm"
	"github.com/claimbus/claimbus/internal/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// storm's closed and open loops against the floor: one 201 per email,
// the rest 409 already_taken, and storm's check passes.
func TestFloorUnderStorm(t *testing.T) {
	t.Parallel()
	pool := pgtest.Connect(t, pgtest.DSN(t), pgtest.PoolConfig{MaxConns: 8})
	require.NoError(t, floor.Create(context.Background(), pool))
	srv := httptest.NewServer(floor.Handler(pool))
	t.Cleanup(srv.Close)

	r, err := storm.Run(t.Context(), storm.Config{Targets: []string{srv.URL}, Requests: 300, Emails: 30, Concurrency: 16, Timeout: storm.DefaultTimeout})
	require.NoError(t, err)
	require.True(t, r.OK(), r.Problems)
	require.Equal(t, map[int]int{201: 30, 409: 270}, r.Status)
	require.Equal(t, map[int]map[string]int{409: {"already_taken email": 270}}, r.Reasons)

	r, err = storm.Run(t.Context(), storm.Config{Targets: []string{srv.URL}, Rate: 200, Duration: time.Second, Dup: 0.9, MaxInFlight: 100, Timeout: storm.DefaultTimeout})
	require.NoError(t, err)
	require.True(t, r.OK(), r.Problems)
	require.Equal(t, map[int]int{201: 20, 409: 180}, r.Status)
}
