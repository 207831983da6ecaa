package sqltransport_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/claimbus/claimbus/bus"
	"github.com/claimbus/claimbus/bus/bustest"
	"github.com/claimbus/claimbus/bus/sqltransport"
	"github.com/claimbus/claimbus/internal/pgtest"
)

// harness runs the nodes of each test on a database of its own, with
// notifications on or off.
//
// The LossNotifier check runs here with notifications on only: the LISTEN
// connection is held for good, so terminating the node's backends always
// ends a connection the transport is using, and it must notice. With
// DisableNotify a node holds no connection between polls, and a poll may
// run on one the pool opened after the terminate (1 run in about 15 then
// waited for its reply, the transport rightly seeing no loss).
// TestDispatchFailsWhenTheDatabaseCrashes runs the check with both
// settings on a cluster that crashes, where no connection survives.
func harness(notify bool) bustest.Harness {
	return bustest.Harness{
		MultiNode:    true,
		Durable:      true,
		Redelivery:   true,
		LossNotifier: notify,
		Inspects:     true,
		NewBackend: func(t testing.TB) bustest.Backend {
			dsn := pgtest.DSN(t)
			inspector := pgtest.Connect(t, dsn, pgtest.PoolConfig{ApplicationName: "inspector"})
			return bustest.Backend{
				Node: func(t testing.TB, cfg bus.Config, o bustest.NodeOptions) bus.Config {
					_, tr := newTransport(t, dsn, o.ID, sqltransport.Config{DisableNotify: !notify, AckDeadline: o.RedeliverAfter})
					return tr.BusConfig(cfg)
				},
				// Every connection of the node's pool, the LISTEN one
				// among them, is terminated.
				LoseConnection: func(t testing.TB, id string) {
					killed, err := pgtest.TerminateBackends(context.Background(), dsn, id)
					require.NoError(t, err)
					require.NotZero(t, killed)
				},
				// An acked message's row is deleted.
				Unacked: func(t testing.TB, topic string) int { return rows(t, inspector, topic) },
			}
		},
	}
}

func TestConformance(t *testing.T) {
	t.Parallel()
	for _, notify := range []bool{true, false} {
		t.Run(fmt.Sprintf("notify=%v", notify), func(t *testing.T) {
			t.Parallel()
			bustest.Run(t, harness(notify))
		})
	}
}
