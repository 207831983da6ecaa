package natstransport_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/claimbus/claimbus/bus"
	"github.com/claimbus/claimbus/bus/natstransport"
	"github.com/claimbus/claimbus/bus/sqltransport"
	"github.com/claimbus/claimbus/internal/natstest"
	"github.com/claimbus/claimbus/internal/pgtest"
)

// BenchmarkDispatch measures a Dispatch from node A to node B and back: in
// process (one bus, no transport, for scale), through an in-process NATS
// server with the stream on disk and in memory, and through PostgreSQL
// with bus/sqltransport (LISTEN/NOTIFY wake-ups, its default).
func BenchmarkDispatch(b *testing.B) {
	echo := func(bb *bus.Bus) {
		require.NoError(b, bus.Handle(bb, func(_ context.Context, c *Echo) (string, error) { return c.Text, nil }))
	}
	run := func(b *testing.B, sender *bus.Bus) {
		ctx := context.Background()
		b.ReportAllocs()
		for b.Loop() {
			if _, err := bus.Dispatch[string](ctx, sender, &Echo{Text: "x"}); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.Run("transport=inprocess", func(b *testing.B) {
		bb, err := bus.New(bus.Config{})
		require.NoError(b, err)
		echo(bb)
		require.NoError(b, bb.Start(context.Background()))
		b.Cleanup(func() { require.NoError(b, bb.Close()) })
		run(b, bb)
	})
	for _, bc := range []struct {
		name string
		cfg  natstransport.Config
	}{
		{"transport=nats-file", natstransport.Config{}},
		{"transport=nats-memory", natstransport.Config{MemoryStorage: true}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			srv := natstest.Start(b)
			newNode(b, srv.URL(), "node-b", bc.cfg, bus.Config{}, echo)
			a := newNode(b, srv.URL(), "node-a", bc.cfg, bus.Config{}, nil)
			run(b, a.bus)
		})
	}
	b.Run("transport=postgres", func(b *testing.B) {
		dsn := pgtest.DSN(b)
		sqlNode := func(id string, reg func(*bus.Bus)) *bus.Bus {
			pool := pgtest.Connect(b, dsn, pgtest.PoolConfig{MaxConns: 12, ApplicationName: id})
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			tr, err := sqltransport.New(ctx, pool, sqltransport.Config{NodeID: id})
			require.NoError(b, err)
			b.Cleanup(func() { require.NoError(b, tr.Close()) })
			bb, err := bus.New(tr.BusConfig(bus.Config{}))
			require.NoError(b, err)
			if reg != nil {
				reg(bb)
			}
			require.NoError(b, bb.Start(ctx))
			b.Cleanup(func() { require.NoError(b, bb.Close()) })
			return bb
		}
		sqlNode("node-b", echo)
		run(b, sqlNode("node-a", nil))
	})
}
