package sqltransport_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/claimbus/claimbus/bus"
	"github.com/claimbus/claimbus/bus/bustest"
	"github.com/claimbus/claimbus/bus/sqltransport"
	"github.com/claimbus/claimbus/internal/pgtest"
	"github.com/claimbus/claimbus/middleware"
)

// While the database is down, publishing fails with an error matching
// middleware.ErrUnavailable (a rejection a sender can answer as "try
// again"), the cause kept beside it; once the database is back, the
// transport works again on its own.
func TestPublishUnavailable(t *testing.T) {
	t.Parallel()
	cluster := pgtest.NewCluster(t)
	n := newNode(t, cluster.DSN(), "solo", sqltransport.Config{}, bus.Config{}, registerEcho(t))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	got, err := bus.Dispatch[string](ctx, n.bus, &Echo{Text: "before"})
	require.NoError(t, err)
	require.Equal(t, "before", got)

	require.NoError(t, cluster.Stop(ctx))
	// A topic whose table exists, and one whose table would be created.
	for _, topic := range []string{"command.sqltransport_test.Echo", "command.sqltransport_test.New"} {
		err := n.tr.BusConfig(bus.Config{}).Publisher.Publish(topic, message.NewMessage(uuid.NewString(), []byte(`{}`)))
		require.Error(t, err, topic)
		require.ErrorIs(t, err, middleware.ErrUnavailable, "%s: %v", topic, err)
		var rej *middleware.Rejection
		require.ErrorAs(t, err, &rej)
		require.NotContains(t, rej.Message, "127.0.0.1", "the rejection tells nothing of the server")
		require.NotContains(t, rej.Message, "postgres")
		require.True(t, errors.Unwrap(err) != nil || len(unwrapAll(err)) > 1, "the cause is kept: %v", err)
	}
	_, err = bus.Dispatch[string](ctx, n.bus, &Echo{Text: "during"})
	require.ErrorIs(t, err, middleware.ErrUnavailable)
	require.Zero(t, n.bus.Pending())

	require.NoError(t, cluster.Start(ctx))
	eventually(t, func() bool {
		dctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		got, err := bus.Dispatch[string](dctx, n.bus, &Echo{Text: "after"})
		return err == nil && got == "after"
	}, "a round trip once the database is back")
}

// A Dispatch waiting for its reply when the database crashes returns at
// once, unavailable with its outcome unknown, instead of waiting until its
// deadline for a reply the crash may have lost (with synchronous_commit
// off, as pgtest's clusters run, a crash forgets the last commits): the
// LISTEN connection sees the loss, or with DisableNotify a subscription's
// query. Once the database is back, round trips work again on their own:
// the suite's LossNotifier check, on a cluster that crashes.
func TestDispatchFailsWhenTheDatabaseCrashes(t *testing.T) {
	t.Parallel()
	for _, notify := range []bool{true, false} {
		t.Run(fmt.Sprintf("notify=%v", notify), func(t *testing.T) {
			t.Parallel()
			bustest.Run(t, bustest.Harness{LossNotifier: true, Only: []string{"LossNotifier"}, NewBackend: func(t testing.TB) bustest.Backend {
				cluster := pgtest.NewCluster(t)
				return bustest.Backend{
					Node: func(t testing.TB, cfg bus.Config, o bustest.NodeOptions) bus.Config {
						_, tr := newTransport(t, cluster.DSN(), o.ID, sqltransport.Config{DisableNotify: !notify})
						return tr.BusConfig(cfg)
					},
					LoseConnection: func(t testing.TB, _ string) {
						ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
						defer cancel()
						require.NoError(t, cluster.Crash(ctx))
						require.NoError(t, cluster.Start(ctx))
					},
				}
			}})
		})
	}
}

// A topic's table found gone after this transport created it (dropped, or
// restored from an older backup) is created again by the next publish, and
// round trips work again without a restart.
func TestPublishRecreatesAMissingTable(t *testing.T) {
	t.Parallel()
	dsn := pgtest.DSN(t)
	newNode(t, dsn, "node-b", sqltransport.Config{}, bus.Config{}, registerEcho(t))
	a := newNode(t, dsn, "node-a", sqltransport.Config{}, bus.Config{}, nil)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	got, err := bus.Dispatch[string](ctx, a.bus, &Echo{Text: "before"})
	require.NoError(t, err)
	require.Equal(t, "before", got)

	_, err = a.pool.Exec(ctx, `DROP TABLE "claimbus_command.sqltransport_test.Echo"`)
	require.NoError(t, err)
	got, err = bus.Dispatch[string](ctx, a.bus, &Echo{Text: "after"})
	require.NoError(t, err, "the publish creates the table again")
	require.Equal(t, "after", got)
}
