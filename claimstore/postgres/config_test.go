package postgres_test

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/claimbus/claimbus/claimstore"
	"github.com/claimbus/claimbus/claimstore/postgres"
	"github.com/claimbus/claimbus/lockstore"
)

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		cfg  postgres.Config
		want []string // every problem reported
	}{
		{"zero", postgres.Config{}, nil},
		{"set", postgres.Config{Schema: "app", MaxBatch: 10, BatchLanes: 4}, nil},
		{"bad schema", postgres.Config{Schema: "a\x00b"}, []string{"Config.Schema"}},
		{"long schema", postgres.Config{Schema: strings.Repeat("s", 64)}, []string{"Config.Schema"}},
		{"all bad", postgres.Config{MaxBatch: -1, BatchLanes: postgres.MaxBatchLanes + 1},
			[]string{"Config.MaxBatch is -1", "Config.BatchLanes is 65"}},
		{"batch too big", postgres.Config{MaxBatch: postgres.MaxBatchLimit + 1}, []string{"Config.MaxBatch"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			err := tc.cfg.Validate()
			if tc.want == nil {
				require.NoError(t, err)
				return
			}
			require.Error(t, err)
			for _, w := range tc.want {
				require.Contains(t, err.Error(), w)
			}
		})
	}
}

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
