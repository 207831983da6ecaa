package app_test

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/claimbus/claimbus/example_app/app"
)

// While the node is unavailable every route that writes answers 503
// unavailable with Retry-After, without running its command; the reads
// answer; /healthz answers 503 with the reason. SetAvailable undoes it.
func TestAvailabilityGate(t *testing.T) {
	t.Parallel()
	node, _, url := sqliteNode(t, app.Config{})
	seed(t, url)
	before := staffCount(t, node)
	node.SetUnavailable(app.ReasonNodeNameLost)
	require.Equal(t, app.ReasonNodeNameLost, node.Unavailable())
	for _, rt := range routes {
		r := send(t, rt.method, url+rt.path, rt.body)
		switch {
		case rt.path == "/healthz":
			require.Equal(t, http.StatusServiceUnavailable, r.status, "%s", r.raw)
			require.Equal(t, "unavailable", r.body["status"])
			require.Equal(t, "node_name_lost", r.body["reason"])
			require.Equal(t, "1", r.header.Get("Retry-After"))
		case rt.method == http.MethodPost:
			require.Equal(t, http.StatusServiceUnavailable, r.status, "%s %s: %s", rt.method, rt.path, r.raw)
			require.Equal(t, "unavailable", r.body["code"], "%s %s", rt.method, rt.path)
			require.Equal(t, "1", r.header.Get("Retry-After"))
		default:
			require.Less(t, r.status, 500, "%s %s: reads answer: %s", rt.method, rt.path, r.raw)
		}
	}
	require.Equal(t, before, staffCount(t, node), "no command ran")
	// Routes that do not exist are still 404 and 405, not 503.
	require.Equal(t, http.StatusNotFound, send(t, "POST", url+"/nope", "{}").status)
	require.Equal(t, http.StatusMethodNotAllowed, send(t, "DELETE", url+"/staff/s-1", "").status)

	node.SetAvailable()
	require.Empty(t, node.Unavailable())
	for _, rt := range routes {
		r := send(t, rt.method, url+rt.path, rt.body)
		require.Equal(t, rt.ok, r.status, "%s %s: %s", rt.method, rt.path, r.raw)
	}
	r := send(t, "GET", url+"/healthz", "")
	require.Equal(t, "ok", r.body["status"])
	require.NotContains(t, r.body, "reason")
}
