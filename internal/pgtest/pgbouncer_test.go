package pgtest

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
)

// backendPIDs opens two connections to dsn, keeps both open, and returns
// the backend pid each answers, one after the other.
func backendPIDs(t *testing.T, dsn string) (uint32, uint32) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var pids [2]uint32
	for i := range pids {
		conn, err := pgx.Connect(ctx, dsn)
		require.NoError(t, err)
		t.Cleanup(func() { _ = conn.Close(context.Background()) })
		require.NoError(t, conn.QueryRow(ctx, "SELECT pg_backend_pid()", pgx.QueryExecModeSimpleProtocol).Scan(&pids[i]))
	}
	return pids[0], pids[1]
}

// TestStartPgBouncer shows that the bouncer runs in the mode asked: in
// transaction mode, a second client open beside the first is served by the
// server connection the first just left; in session mode each has its own.
func TestStartPgBouncer(t *testing.T) {
	t.Parallel()
	c := NewCluster(t)
	for _, mode := range []string{PoolTransaction, PoolSession} {
		t.Run(mode, func(t *testing.T) {
			dsn := StartPgBouncer(t, c, mode)
			a, b := backendPIDs(t, dsn)
			if mode == PoolTransaction {
				require.Equal(t, a, b, "two clients of a transaction-mode bouncer, one after the other, share its idle server connection")
			} else {
				require.NotEqual(t, a, b, "two clients of a session-mode bouncer have a session each")
			}
		})
	}
}
