package storm

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/claimbus/claimbus/example_app/internal/storm/stormtest"
)

// A faithful storm across three nodes: one 201 per address, the rest 409,
// the requests spread evenly, and a clean check.
func TestRunFaithful(t *testing.T) {
	t.Parallel()
	store := stormtest.NewStore()
	nodes := []*stormtest.Node{{Name: "a", Store: store}, {Name: "b", Store: store}, {Name: "c", Store: store}}
	var targets []string
	for _, n := range nodes {
		targets = append(targets, stormtest.Start(t, n))
	}
	cfg := testConfig(targets...)
	cfg.Requests, cfg.Emails = 2000, 200
	r, err := Run(t.Context(), cfg)
	require.NoError(t, err)
	require.True(t, r.OK(), r.Problems)
	require.Equal(t, map[int]int{201: 200, 409: 1800}, r.Status)
	require.Equal(t, map[int]map[string]int{409: {"already_taken email": 1800}}, r.Reasons)
	require.Zero(t, r.Timeouts+r.Errors+r.Cancelled+r.NotSent)
	require.Equal(t, 200, store.Len())
	created := 0
	for i, n := range nodes {
		require.Equal(t, "node "+n.Name+" ("+targets[i]+")", r.Nodes[i].String())
		require.InDelta(t, 667, n.Posts(), 1)
		require.Equal(t, int64(200), n.Gets(), "the check asks each node for each address")
		created += r.Nodes[i].Created
	}
	require.Equal(t, 200, created)
	require.Positive(t, r.Latency.Max)
	require.LessOrEqual(t, r.Latency.P50, r.Latency.P90)
	require.LessOrEqual(t, r.Latency.P90, r.Latency.P99)
	require.LessOrEqual(t, r.Latency.P99, r.Latency.Max)

	var out bytes.Buffer
	r.Write(&out)
	require.Regexp(t, `(?m)^  201 created +200$`, out.String())
	require.Regexp(t, `(?m)^  409 conflict +1800  already_taken email 1800$`, out.String())
	require.Regexp(t, `(?m)^  5xx +0$`, out.String())
	require.Contains(t, out.String(), "check: OK: 200 emails on 3 nodes")
}

// Cancelling the context stops the storm: what was in flight is
// cancelled, the rest is not sent, and the check does not run.
func TestRunInterrupted(t *testing.T) {
	t.Parallel()
	gate := make(chan struct{})
	defer close(gate)
	arrived := make(chan struct{})
	node := &stormtest.Node{Name: "a", Gate: gate, Arrived: arrived}
	target := stormtest.Start(t, node)
	ctx, cancel := context.WithCancel(t.Context())
	cfg := testConfig(target)
	cfg.Concurrency = 4
	done := make(chan error, 1)
	var r *Report
	go func() {
		var err error
		r, err = Run(ctx, cfg)
		done <- err
	}()
	for range 4 {
		<-arrived
	}
	cancel()
	require.ErrorIs(t, <-done, ErrInterrupted)
	require.False(t, r.Checked)
	require.False(t, r.OK())
	require.Equal(t, 4, r.Cancelled)
	require.Equal(t, 96, r.NotSent)
	require.Equal(t, int64(4), node.Posts())
	require.Zero(t, node.Gets())
	var out bytes.Buffer
	r.Write(&out)
	require.Contains(t, out.String(), "check: not run (interrupted)")
	require.Regexp(t, `(?m)^  not sent +96$`, out.String())
}

// A target whose /healthz is not "ok" stops the storm before it starts.
func TestRunUnhealthy(t *testing.T) {
	t.Parallel()
	good := &stormtest.Node{Name: "a"}
	goodURL := stormtest.Start(t, good)
	bad := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = w.Write([]byte(`{"status":"unavailable","node":"b"}`))
	}))
	defer bad.Close()
	r, err := Run(t.Context(), testConfig(goodURL, bad.URL))
	require.ErrorIs(t, err, ErrUnhealthy)
	require.Nil(t, r)
	require.Contains(t, err.Error(), bad.URL+": GET /healthz answered 503")
	require.Zero(t, good.Posts())
}

// A request that gets no answer within the timeout is counted as such.
func TestRunTimeout(t *testing.T) {
	t.Parallel()
	never := make(chan struct{})
	defer close(never)
	target := stormtest.Start(t, &stormtest.Node{Name: "a", Gate: never})
	cfg := testConfig(target)
	cfg.Requests, cfg.Emails, cfg.Timeout = 4, 2, 50*time.Millisecond
	r, err := Run(t.Context(), cfg)
	require.NoError(t, err)
	require.Equal(t, 4, r.Timeouts)
	require.Equal(t, "no answer within 50ms", r.Nodes[0].FirstError)
	// Nothing was created, and nothing is listed: the check holds.
	require.True(t, r.OK(), r.Problems)
	var out bytes.Buffer
	r.Write(&out)
	require.Regexp(t, `(?m)^  transport errors +4  4 timeouts$`, out.String())
}
