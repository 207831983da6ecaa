package e2e

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/claimbus/claimbus/internal/pgtest"
)

// Three serve processes on one PostgreSQL with -staff-model events and a
// projection lag of 300ms, in both transports: a storm of sign-ups (the
// same addresses in several spellings, spread over the nodes) creates one
// member per address, registers one StaffRegistered per address in the
// events table, the read model catches up with one row per address, and
// backstop_violations stays 0 on every node. One Idempotency-Key sent to
// each node gets one answer.
func TestThreeNodesEventsModel(t *testing.T) {
	t.Parallel()
	bin := buildApp(t)
	for _, transport := range []string{"inprocess", "postgres"} {
		t.Run(transport, func(t *testing.T) {
			t.Parallel()
			const emails, copies = 30, 5
			dsn := pgtest.DSN(t)
			nodes := startNodes(t, bin, dsn, []string{"a", "b", "c"},
				"-transport", transport, "-staff-model", "events", "-projection-lag", "300ms")
			require.Contains(t, nodes[0].out.String(), "staff model events (projection lag 300ms, reservations true)")
			pool := pgtest.Connect(t, dsn, pgtest.PoolConfig{MaxConns: 2, ApplicationName: "observer"})
			c := newClient(t)
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()

			out := storm(ctx, c, urls(nodes...), signups("ev", emails, copies), stormConfig{})
			statuses := map[int]int{}
			for _, o := range out {
				require.NoError(t, o.answer.Err)
				statuses[o.answer.Status]++
			}
			require.Equal(t, map[int]int{http.StatusCreated: emails, http.StatusConflict: emails * (copies - 1)}, statuses)

			var registered, distinct int
			require.NoError(t, pool.QueryRow(ctx, `SELECT count(*), count(DISTINCT email) FROM staff_event`).Scan(&registered, &distinct))
			require.Equal(t, emails, registered, "one StaffRegistered per address")
			require.Equal(t, emails, distinct)
			eventually(t, func() bool { _, n := staffRows(t, pool); return n == emails }, "the read model shows the %d members", emails)

			// One key, one answer, whichever node gets it.
			var first answer
			for i, p := range nodes {
				a := postWith(ctx, c, p.url+"/staff", http.Header{"Idempotency-Key": {"key-1"}}, signup{StaffID: "idem-1", Email: "Idem@Example.org", Name: "Idem"})
				require.NoError(t, a.Err)
				if i == 0 {
					require.Equal(t, http.StatusCreated, a.Status, "%v", a.Body)
					first = a
					continue
				}
				require.Equal(t, first, a, "node %s answers the key's first answer", p.name)
			}

			for _, p := range nodes {
				h := get(ctx, c, p.url+"/healthz")
				require.NoError(t, h.Err)
				require.EqualValues(t, 0, h.Body["backstop_violations"], "node %s", p.name)
			}
			for _, p := range nodes {
				p.requireCleanExit(t)
				require.NotContains(t, p.out.String(), backstopLog)
			}
		})
	}
}
