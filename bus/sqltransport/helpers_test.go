package sqltransport_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/claimbus/claimbus/bus"
	"github.com/claimbus/claimbus/bus/bustest"
	"github.com/claimbus/claimbus/bus/sqltransport"
	"github.com/claimbus/claimbus/internal/pgtest"
)

type (
	Echo  struct{ Text string }
	Write struct{ Email string }
)

// registerEcho registers a handler that returns Echo's text.
func registerEcho(t testing.TB) func(b *bus.Bus) {
	return func(b *bus.Bus) {
		require.NoError(t, bus.Handle(b, func(_ context.Context, c *Echo) (string, error) { return c.Text, nil }))
	}
}

// node is one bus on the Postgres transport, with its own pool.
type node struct {
	pool *pgxpool.Pool
	tr   *sqltransport.Transport
	bus  *bus.Bus
}

// newTransport opens a transport for node id on the database dsn names,
// on a pool of its own whose connections are named id; both are closed
// when the test ends.
func newTransport(t testing.TB, dsn, id string, cfg sqltransport.Config) (*pgxpool.Pool, *sqltransport.Transport) {
	t.Helper()
	pool := pgtest.Connect(t, dsn, pgtest.PoolConfig{MaxConns: 12, ApplicationName: id})
	cfg.NodeID = id
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	tr, err := sqltransport.New(ctx, pool, cfg)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, tr.Close()) })
	return pool, tr
}

// newNode starts a node on the database dsn names; reg registers its
// handlers. Everything is closed when the test ends, the bus first.
func newNode(t testing.TB, dsn, id string, tcfg sqltransport.Config, bcfg bus.Config, reg func(b *bus.Bus)) *node {
	t.Helper()
	pool, tr := newTransport(t, dsn, id, tcfg)
	return &node{pool: pool, tr: tr, bus: bustest.StartBus(t, tr.BusConfig(bcfg), reg)}
}

// rows counts the rows of topic's table; 0 when it has none.
func rows(t testing.TB, pool *pgxpool.Pool, topic string) int {
	t.Helper()
	var n int
	err := pool.QueryRow(context.Background(), fmt.Sprintf(`SELECT count(*) FROM "claimbus_%s"`, topic)).Scan(&n)
	if pgErr := (*pgconn.PgError)(nil); errors.As(err, &pgErr) && pgErr.Code == "42P01" {
		return 0 // undefined_table: nothing was published to topic
	}
	require.NoError(t, err)
	return n
}

// eventually polls cond until it holds or a deadline passes.
func eventually(t testing.TB, cond func() bool, msg string) {
	t.Helper()
	require.Eventually(t, cond, 20*time.Second, 5*time.Millisecond, msg)
}

// unwrapAll returns what err wraps, one level down.
func unwrapAll(err error) []error {
	if u, ok := err.(interface{ Unwrap() []error }); ok {
		return u.Unwrap()
	}
	if e := errors.Unwrap(err); e != nil {
		return []error{e}
	}
	return nil
}
