package sqltransport_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/claimbus/claimbus/bus"
	"github.com/claimbus/claimbus/bus/sqltransport"
	"github.com/claimbus/claimbus/internal/pgtest"
)

// BenchmarkDispatch measures a Dispatch from node A to node B and back
// through PostgreSQL, with LISTEN/NOTIFY wake-ups and with polling alone
// (the default intervals: 100 ms for commands, 10 ms for replies; and 10 ms
// for both).
func BenchmarkDispatch(b *testing.B) {
	for _, bc := range []struct {
		name string
		cfg  sqltransport.Config
	}{
		{"wake=notify", sqltransport.Config{}},
		{"wake=poll", sqltransport.Config{DisableNotify: true}},
		{"wake=poll-10ms", sqltransport.Config{DisableNotify: true, PollInterval: 10 * time.Millisecond}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			dsn := pgtest.DSN(b)
			newNode(b, dsn, "node-b", bc.cfg, bus.Config{}, func(bb *bus.Bus) {
				require.NoError(b, bus.Handle(bb, func(_ context.Context, c *Echo) (string, error) { return c.Text, nil }))
			})
			a := newNode(b, dsn, "node-a", bc.cfg, bus.Config{}, nil)
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				if _, err := bus.Dispatch[string](ctx, a.bus, &Echo{Text: "x"}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
