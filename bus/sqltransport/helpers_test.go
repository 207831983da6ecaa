package sqltransport_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/claimbus/claimbus/bus"
	"github.com/claimbus/claimbus/bus/sqltransport"
	"github.com/claimbus/claimbus/internal/pgtest"
)

// node is one bus on the Postgres transport, with its own pool.
type node struct {
	pool *pgxpool.Pool
	tr   *sqltransport.Transport
	bus  *bus.Bus
}

// newNode starts a node on the database dsn names; reg registers its
// handlers. Everything is closed when the test ends, the bus first.
func newNode(t testing.TB, dsn, id string, tcfg sqltransport.Config, bcfg bus.Config, reg func(b *bus.Bus)) *node {
	t.Helper()
	pool := pgtest.Connect(t, dsn, pgtest.PoolConfig{MaxConns: 12, ApplicationName: id})
	tcfg.NodeID = id
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	tr, err := sqltransport.New(ctx, pool, tcfg)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, tr.Close()) })
	b, err := bus.New(tr.BusConfig(bcfg))
	require.NoError(t, err)
	if reg != nil {
		reg(b)
	}
	require.NoError(t, b.Start(ctx))
	t.Cleanup(func() { require.NoError(t, b.Close()) })
	return &node{pool: pool, tr: tr, bus: b}
}

// rows counts the rows of topic's table.
func rows(t testing.TB, pool *pgxpool.Pool, topic string) int {
	t.Helper()
	var n int
	require.NoError(t, pool.QueryRow(context.Background(), fmt.Sprintf(`SELECT count(*) FROM "claimbus_%s"`, topic)).Scan(&n))
	return n
}

// eventually polls cond until it holds or a deadline passes.
func eventually(t testing.TB, cond func() bool, msg string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting: %s", msg)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
