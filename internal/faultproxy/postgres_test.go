package faultproxy_test

import (
	"context"
	"net"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/claimbus/claimbus/internal/faultproxy"
	"github.com/claimbus/claimbus/internal/pgtest"
)

// TestPostgresBlackHole runs pgx through the proxy against a real server: a
// query times out in a black hole, and a connection the client closed
// during the black hole stays alive on the server until the network heals.
func TestPostgresBlackHole(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	dsn := pgtest.DSN(t)
	cfg, err := pgx.ParseConfig(dsn)
	require.NoError(t, err)
	p, err := faultproxy.New(net.JoinHostPort(cfg.Host, strconv.Itoa(int(cfg.Port))))
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, p.Close()) })
	host, port, err := net.SplitHostPort(p.Addr())
	require.NoError(t, err)
	portN, err := strconv.ParseUint(port, 10, 16)
	require.NoError(t, err)
	cfg.Host, cfg.Port, cfg.Fallbacks = host, uint16(portN), nil

	admin, err := pgx.Connect(ctx, dsn) // not through the proxy
	require.NoError(t, err)
	defer admin.Close(context.Background())
	// testify's Never and Eventually may leave a call of their condition
	// running when they return: admin serves one call at a time.
	var adminMu sync.Mutex
	sessionAlive := func(pid uint32) bool {
		adminMu.Lock()
		defer adminMu.Unlock()
		var n int
		require.NoError(t, admin.QueryRow(ctx,
			"SELECT count(*) FROM pg_stat_activity WHERE pid = $1", pid).Scan(&n))
		return n == 1
	}

	conn, err := pgx.ConnectConfig(ctx, cfg)
	require.NoError(t, err)
	defer conn.Close(context.Background())
	var pid uint32
	require.NoError(t, conn.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&pid))
	require.True(t, sessionAlive(pid))

	p.BlackHole()
	qctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	var one int
	err = conn.QueryRow(qctx, "SELECT 1").Scan(&one)
	cancel()
	require.Error(t, err, "a query crossed a black hole")
	require.True(t, pgconn.Timeout(err), "not a timeout: %v", err)

	// The client gives up on its connection; the server cannot tell.
	require.NoError(t, conn.PgConn().Conn().Close())
	// A close that leaked through would end the session within a few ms.
	require.Never(t, func() bool { return !sessionAlive(pid) }, 200*time.Millisecond, 10*time.Millisecond,
		"the server saw a close across a black hole")

	p.Heal()
	require.Eventually(t, func() bool { return !sessionAlive(pid) }, bound, 10*time.Millisecond,
		"the server still has the session after Heal")

	// pgx's clean-up of the timed-out connection (a cancel request,
	// through the proxy too) ends once the network is back.
	select {
	case <-conn.PgConn().CleanupDone():
	case <-time.After(bound):
		t.Fatal("pgx did not finish closing its connection")
	}

	// And the proxy forwards new connections again.
	again, err := pgx.ConnectConfig(ctx, cfg)
	require.NoError(t, err)
	defer again.Close(context.Background())
	require.NoError(t, again.QueryRow(ctx, "SELECT 1").Scan(&one))
}
