package app_test

import (
	"context"
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/claimbus/claimbus/example_app/app"
	"github.com/claimbus/claimbus/internal/pgtest"
	"github.com/claimbus/claimbus/internal/testwait"
)

// route is one request of the API, with the status it answers when the
// database is up.
type route struct {
	method, path, body string
	ok                 int
}

// routes are a request on every route of the API, each valid, against
// the data seed writes.
var routes = []route{
	{"GET", "/healthz", "", 200},
	{"POST", "/staff", `{"staff_id":"s-1","email":"ann@x.org","name":"Ann"}`, 201},
	{"GET", "/staff/s-1", "", 200},
	{"GET", "/staff?email=ann@x.org", "", 200},
	{"POST", "/wallets", `{"wallet_id":"carl","currency":"EUR","balance":0}`, 201},
	{"GET", "/wallets/alice", "", 200},
	{"POST", "/transfers", `{"transfer_id":"t-2","from_wallet_id":"alice","to_wallet_id":"bob","amount":5,"currency":"EUR"}`, 201},
	{"GET", "/transfers/t-1", "", 200},
	{"POST", "/transfers/t-1/approve", "", 200},
	{"POST", "/transfers/t-2/cancel", `{"reason":"changed my mind"}`, 200},
	{"POST", "/lobbies", `{"lobby_id":"l-2","words":["stone"]}`, 201},
	{"POST", "/lobbies/l-1/guesses", `{"word":"apple"}`, 200},
}

// While the database is stopped every route answers 503 unavailable (a
// sign-up of the events model not_applied, from its transaction),
// without a word of the driver, the server's address or its user, with
// commands in process and through the PostgreSQL transport; once it is
// back, every route works again, nothing restarted.
func TestOutage(t *testing.T) {
	t.Parallel()
	cluster := pgtest.NewCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	u, err := url.Parse(cluster.DSN())
	require.NoError(t, err)
	conn, err := pgx.Connect(ctx, cluster.DSN())
	require.NoError(t, err)
	for _, db := range []string{"inprocess", "transport", "events"} {
		_, err := conn.Exec(ctx, "CREATE DATABASE "+db)
		require.NoError(t, err)
	}
	require.NoError(t, conn.Close(ctx))
	dsn := func(db string) string {
		d := *u
		d.Path = "/" + db
		return d.String()
	}
	// What no body may say: the server's address and port, its user and
	// the databases.
	secrets := []string{u.Hostname(), ":" + u.Port(), u.Port(), u.User.Username() + "@", "inprocess", "transport", "events"}

	nodes := map[string]string{}
	_, nodes["in process"] = pgNode(t, dsn("inprocess"), "a", "inprocess", app.Config{RequestTimeout: 10 * time.Second})
	_, nodes["postgres transport"] = pgNode(t, dsn("transport"), "b", "postgres", app.Config{RequestTimeout: 10 * time.Second})
	// The events staff model: its reservations, its claim store and its
	// projection meet the outage too.
	_, nodes["events model"] = pgNode(t, dsn("events"), "c", "inprocess",
		app.Config{RequestTimeout: 10 * time.Second, StaffModel: app.StaffEvents})
	for _, base := range nodes {
		seed(t, base)
	}

	require.NoError(t, cluster.Stop(ctx))
	for name, base := range nodes {
		for _, rt := range routes {
			what := name + ": " + rt.method + " " + rt.path
			t.Run("stopped "+what, func(t *testing.T) {
				r := send(t, rt.method, base+rt.path, rt.body)
				t.Logf("%d %s", r.status, r.raw)
				requireNoInternals(t, r.raw, what, secrets...)
				require.Equal(t, http.StatusServiceUnavailable, r.status, "%s", r.raw)
				if rt.path == "/healthz" {
					require.Equal(t, "unavailable", r.body["status"], "%s", r.raw)
					require.ElementsMatch(t, []string{"status", "node", "backend", "backstop_violations"}, keys(r.body), "%s", r.raw)
					return
				}
				want := "unavailable"
				if name == "events model" && rt.method == http.MethodPost && rt.path == "/staff" {
					// Its transaction could not begin: it certainly did not apply.
					want = "not_applied"
				}
				require.Equal(t, want, r.body["code"], "%s", r.raw)
				require.NotEmpty(t, r.body["message"], "%s", r.raw)
			})
		}
	}

	require.NoError(t, cluster.Start(ctx))
	for name, base := range nodes {
		waitFor(t, time.Minute, name+": /healthz answers 200 again", func() bool {
			return send(t, "GET", base+"/healthz", "").status == http.StatusOK
		})
		for _, rt := range routes {
			what := name + ": " + rt.method + " " + rt.path
			// The first command through a lock connection that died with
			// the server may still find it broken: the store replaces it
			// in the background, so a retry soon succeeds. In the events
			// model the read model shows the new member once projected.
			var r response
			waitFor(t, 30*time.Second, what+" recovers", func() bool {
				r = send(t, rt.method, base+rt.path, rt.body)
				lags := name == "events model" && rt.method == "GET" && r.status == http.StatusNotFound
				return r.status != http.StatusServiceUnavailable && !lags
			})
			require.Equal(t, rt.ok, r.status, "%s: %s", what, r.raw)
		}
		requireNoBackstop(t, base)
	}
}

// waitFor polls cond, on the test's goroutine (its conditions assert
// through send), until it holds; it fails the test after timeout.
func waitFor(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	testwait.Until(t, timeout, 50*time.Millisecond, cond, "%s", what)
}

// keys returns the keys of m.
func keys(m map[string]any) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}
