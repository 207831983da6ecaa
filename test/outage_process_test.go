package e2e

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/claimbus/claimbus/internal/pgtest"
)

// A node process with commands through the PostgreSQL transport, while its
// database is stopped: a sign-up and /healthz answer 503 unavailable,
// naming neither the server nor the driver, and the node logs the cause;
// once the database is back, the same sign-up is created, nothing
// restarted.
func TestProcessOutage(t *testing.T) {
	t.Parallel()
	bin := buildApp(t)
	cluster := pgtest.NewCluster(t)
	u, err := url.Parse(cluster.DSN())
	require.NoError(t, err)
	n := startProcess(t, bin, cluster.DSN(), "a", "-transport", "postgres").ready(t)
	c := newClient(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	require.NoError(t, cluster.Stop(ctx))
	ann := signup{StaffID: "s-1", Email: "ann@example.org", Name: "Ann"}
	for _, a := range []answer{post(ctx, c, n.url+"/staff", ann), get(ctx, c, n.url+"/healthz")} {
		require.NoError(t, a.Err)
		require.Equal(t, http.StatusServiceUnavailable, a.Status, "%v", a.Body)
		body := strings.ToLower(strings.Join(values(a.Body), " "))
		for _, secret := range []string{u.Hostname(), u.Port(), "user=", "sqlstate", "pgx", "pgconn", "insert message"} {
			require.NotContains(t, body, strings.ToLower(secret), "%v", a.Body)
		}
	}
	// The cause is in the node's log, not in the answers (read from the
	// process's output, which may lag behind its answers).
	for _, line := range []string{"request failed: unavailable", "health check: the database does not answer"} {
		eventually(t, func() bool { return strings.Contains(n.out.String(), line) }, "the node logs %q", line)
	}

	require.NoError(t, cluster.Start(ctx))
	var a answer
	eventually(t, func() bool {
		a = post(ctx, c, n.url+"/staff", ann)
		return a.Err == nil && a.Status != http.StatusServiceUnavailable
	}, "the sign-up goes through once the database is back")
	require.Equal(t, http.StatusCreated, a.Status, "%v", a.Body)
	a = post(ctx, c, n.url+"/staff", ann)
	require.Equal(t, http.StatusOK, a.Status, "a replay: %v", a.Body)
	waitHealthy(t, c, n.url)
}

// values returns the values of a JSON object, as text.
func values(m map[string]any) []string {
	out := make([]string, 0, len(m))
	for k, v := range m {
		out = append(out, k)
		if s, ok := v.(string); ok {
			out = append(out, s)
		}
	}
	return out
}
