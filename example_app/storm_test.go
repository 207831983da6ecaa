package main

import (
	"bytes"
	"context"
	"database/sql"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/claimbus/claimbus/example_app/app"
	"github.com/claimbus/claimbus/example_app/internal/storm/stormtest"
	"github.com/claimbus/claimbus/lockstore/sqlite"
)

// fakeNodes starts three fake nodes on one store, and returns them and
// their URLs.
func fakeNodes(t *testing.T, mod func(a, b, c *stormtest.Node)) (*stormtest.Store, []*stormtest.Node, []string) {
	t.Helper()
	store := stormtest.NewStore()
	nodes := []*stormtest.Node{{Name: "a", Store: store}, {Name: "b", Store: store}, {Name: "c", Store: store}}
	if mod != nil {
		mod(nodes[0], nodes[1], nodes[2])
	}
	var urls []string
	for _, n := range nodes {
		urls = append(urls, stormtest.Start(t, n))
	}
	return store, nodes, urls
}

func runStorm(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	var stdout, stderr bytes.Buffer
	code := run(ctx, append([]string{"storm"}, args...), &stdout, &stderr)
	return code, stdout.String(), stderr.String()
}

// A storm of 2000 sign-ups over 200 emails across three faithful nodes:
// 200 created, 1800 already taken, a clean check, exit 0. Stderr is not a
// terminal, so the progress is in lines.
func TestStorm(t *testing.T) {
	t.Parallel()
	store, nodes, urls := fakeNodes(t, nil)
	code, stdout, stderr := runStorm(t, "-target", strings.Join(urls, ","), "-requests", "2000", "-emails", "200", "-seed", "7")
	require.Equal(t, 0, code, "stdout:\n%s\nstderr:\n%s", stdout, stderr)

	require.Regexp(t, `(?m)^storm: closed loop, 2000 POST /staff to 3 nodes, 200 emails, concurrency 32, timeout 20s, seed 7$`, stdout)
	require.Regexp(t, `(?m)^  201 created +200$`, stdout)
	require.Regexp(t, `(?m)^  409 conflict +1800  already_taken email 1800$`, stdout)
	require.Regexp(t, `(?m)^  4xx other +0$`, stdout)
	require.Regexp(t, `(?m)^  5xx +0$`, stdout)
	require.Regexp(t, `(?m)^  transport errors +0$`, stdout)
	require.Regexp(t, `(?m)^  took .*, \d+ req/s \(closed loop: the rate the answers let through, not an open-loop capacity\)$`, stdout)
	require.Regexp(t, `(?m)^  latency p50 [0-9.]+ms  p90 [0-9.]+ms  p99 [0-9.]+ms  max [0-9.]+ms$`, stdout)
	for i, n := range nodes {
		require.Regexp(t, `(?m)^  node `+n.Name+` \(`+urls[i]+`\): 66[67] sent, \d+ created$`, stdout)
	}
	require.Contains(t, stdout, "check: OK: 200 emails on 3 nodes")
	require.Equal(t, 200, store.Len())

	require.Regexp(t, `(?m)^storm: 2000/2000 requests, done in .*, \d+ req/s$`, stderr)
	require.Contains(t, stderr, "storm: checking 200 emails on 3 nodes")
}

// Each broken guarantee makes the storm exit 1, naming the email or node.
func TestStormFaults(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		mod  func(a, b, c *stormtest.Node)
		want func(store *stormtest.Store, nodes []*stormtest.Node, urls []string) string
	}{
		{"two 201s for one email", func(_, b, _ *stormtest.Node) { b.DoubleCreate = true },
			func(store *stormtest.Store, _ []*stormtest.Node, _ []string) string {
				return "email " + store.DoubledCreate() + " got 2 × 201: "
			}},
		{"two rows for one email", func(_, _, c *stormtest.Node) { c.DoubleRow = true },
			func(_ *stormtest.Store, nodes []*stormtest.Node, urls []string) string {
				return "node c (" + urls[2] + ") lists 2 staff for " + nodes[2].DoubledRow() + ": "
			}},
		{"backstop", func(a, _, _ *stormtest.Node) { a.Backstops = 1 },
			func(_ *stormtest.Store, _ []*stormtest.Node, urls []string) string {
				return "node a (" + urls[0] + "): backstop_violations 1"
			}},
		{"one 500", func(_, b, _ *stormtest.Node) { b.Fail500 = 1 },
			func(_ *stormtest.Store, _ []*stormtest.Node, urls []string) string {
				return "node b (" + urls[1] + ") answered 1 POST /staff with a 5xx: 500 ×1 (internal 1)"
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			store, nodes, urls := fakeNodes(t, tt.mod)
			code, stdout, stderr := runStorm(t, "-target", strings.Join(urls, ","), "-requests", "300", "-emails", "30", "-progress", "off")
			require.Equal(t, 1, code, "stdout:\n%s\nstderr:\n%s", stdout, stderr)
			require.Contains(t, stdout, "check: FAILED: 1 problem\n")
			require.Contains(t, stdout, tt.want(store, nodes, urls))
			require.Contains(t, stderr, "example_app storm: FAILED: 1 problem (listed above)")
		})
	}
	// The email created twice is named with both staff and their nodes.
	store, _, urls := fakeNodes(t, func(a, b, c *stormtest.Node) { a.DoubleCreate, b.DoubleCreate, c.DoubleCreate = true, true, true })
	code, stdout, _ := runStorm(t, "-target", strings.Join(urls, ","), "-requests", "300", "-emails", "30", "-progress", "off")
	require.Equal(t, 1, code)
	email := store.DoubledCreate()
	require.NotEmpty(t, email)
	require.Regexp(t, `(?m)^  email `+email+` got 2 × 201: storm-\w+-\d+ from node [abc] \(http://127\.0\.0\.1:\d+\), storm-\w+-\d+ from node [abc] \(http://127\.0\.0\.1:\d+\)$`, stdout)
}

// Bad flags are all reported at once, exit 2, before anything is sent.
func TestStormFlags(t *testing.T) {
	t.Parallel()
	_, nodes, urls := fakeNodes(t, nil)
	tests := []struct {
		args []string
		code int
		want []string
	}{
		{nil, 2, []string{"bad flags", "-target is required"}},
		{[]string{"-target", "ftp://localhost:8080"}, 2, []string{`-target "ftp://localhost:8080": want host:port, or an http:// or https:// URL, such as 127.0.0.1:8080`}},
		{[]string{"-target", "localhost:http"}, 2, []string{`-target "localhost:http": want host:port, or an http:// or https:// URL, such as 127.0.0.1:8080 or http://127.0.0.1:8080: invalid port ":http" after host`}},
		{[]string{"-target", urls[0] + "," + strings.TrimPrefix(urls[0], "http://")}, 2, []string{"is given twice"}},
		{[]string{"-target", urls[0], "-requests", "0"}, 2, []string{"-requests 0: give 1 to 1000000"}},
		{[]string{"-target", urls[0], "-requests", "10", "-emails", "20"}, 2, []string{"-emails 20 is more than -requests 10"}},
		{[]string{"-target", urls[0], "-concurrency", "0"}, 2, []string{"-concurrency 0"}},
		{[]string{"-target", urls[0], "-timeout", "0s"}, 2, []string{"-timeout 0s"}},
		{[]string{"-target", urls[0], "-progress", "fancy"}, 2, []string{`-progress "fancy"`}},
		{[]string{"-target", urls[0] + "," + urls[0]}, 2, []string{"is given twice"}},
		{[]string{"-target", urls[0], "extra"}, 2, []string{`unexpected arguments ["extra"]`}},
		{[]string{"-requests", "x"}, 2, []string{`invalid value "x" for flag -requests`}},
		{[]string{"-bogus"}, 2, []string{"flag provided but not defined: -bogus"}},
		{[]string{"-emails", "-1", "-concurrency", "5000", "-progress", "x"}, 2, []string{"-target is required", "-emails -1", "-concurrency 5000", `-progress "x"`}},
		{[]string{"-target", urls[0], "-rate", "100", "-requests", "10", "-concurrency", "4"}, 2, []string{"-requests is for the closed loop", "-concurrency is for the closed loop"}},
		{[]string{"-target", urls[0], "-duration", "5s"}, 2, []string{"-duration is for the open loop: give -rate or -find-rate"}},
		{[]string{"-target", urls[0], "-rate", "100", "-p99", "1s"}, 2, []string{"-p99 is for -find-rate"}},
		{[]string{"-target", urls[0], "-rate", "-5", "-dup", "1", "-max-in-flight", "0", "-duration", "0s"}, 2, []string{"-rate -5: give a rate above 0", "-dup 1: give a share", "-max-in-flight 0", "-duration 0s"}},
		{[]string{"-target", urls[0], "-find-rate", "-p99", "0s", "-rate-step", "1"}, 2, []string{"-p99 0s", "-rate-step 1: give a factor above 1"}},
		{[]string{"-h"}, 0, []string{"usage: example_app storm -target URL", "-concurrency", "-seed", "Closed loop (the default)", "Open loop (-rate)", "-find-rate"}},
	}
	for _, tt := range tests {
		code, stdout, stderr := runStorm(t, tt.args...)
		require.Equal(t, tt.code, code, "%v: %s", tt.args, stderr)
		require.Empty(t, stdout, tt.args)
		for _, w := range tt.want {
			require.Contains(t, stderr, w, tt.args)
		}
	}
	for _, n := range nodes {
		require.Zero(t, n.Posts())
	}

	var stdout, stderr bytes.Buffer
	require.Equal(t, 0, run(context.Background(), []string{"help"}, &stdout, &stderr))
	require.Contains(t, stdout.String(), "example_app storm [flags]")
}

// A target without a scheme is host:port on http, as serve prints it
// without the http://.
func TestStormTargetHostPort(t *testing.T) {
	t.Parallel()
	store, _, urls := fakeNodes(t, nil)
	var hostPorts []string
	for _, u := range urls {
		hostPorts = append(hostPorts, strings.TrimPrefix(u, "http://"))
	}
	code, stdout, stderr := runStorm(t, "-target", strings.Join(hostPorts, ","), "-requests", "100", "-emails", "10", "-progress", "off")
	require.Equal(t, 0, code, "stdout:\n%s\nstderr:\n%s", stdout, stderr)
	require.Regexp(t, `(?m)^  node a \(`+urls[0]+`\): \d+ sent`, stdout, "the report names the URL it used")
	require.Equal(t, 10, store.Len())
}

// An unreachable target: exit 1 before anything is sent.
func TestStormUnreachable(t *testing.T) {
	t.Parallel()
	_, nodes, urls := fakeNodes(t, nil)
	// A port nothing listens on: a server started and closed.
	dead := stormtest.StartClosed(t)
	code, stdout, stderr := runStorm(t, "-target", urls[0]+","+dead)
	require.Equal(t, 1, code)
	require.Empty(t, stdout)
	require.Contains(t, stderr, "a target is not healthy, so nothing was sent")
	require.Contains(t, stderr, dead+": GET /healthz")
	require.Zero(t, nodes[0].Posts())
}

// SIGINT (the context main passes) stops the storm: exit 1, the partial
// summary printed.
func TestStormInterrupted(t *testing.T) {
	t.Parallel()
	gate, arrived := make(chan struct{}), make(chan struct{})
	defer close(gate)
	_, _, urls := fakeNodes(t, func(a, _, _ *stormtest.Node) { a.Gate, a.Arrived = gate, arrived })
	ctx, cancel := context.WithCancel(t.Context())
	var stdout, stderr bytes.Buffer
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, []string{"storm", "-target", urls[0], "-requests", "100", "-emails", "10", "-concurrency", "2"}, &stdout, &stderr)
	}()
	<-arrived
	<-arrived
	cancel()
	require.Equal(t, 1, <-done)
	require.Contains(t, stdout.String(), "check: not run (interrupted)")
	require.Contains(t, stderr.String(), "storm: 0/100 requests, interrupted after")
	require.Contains(t, stderr.String(), "example_app storm: interrupted with 0 of 100 requests done")
}

// realNodes starts two real nodes of the example on one SQLite database,
// served on 127.0.0.1, and returns their URLs.
func realNodes(t *testing.T) []string {
	t.Helper()
	ctx := context.Background()
	db, err := sql.Open("sqlite", sqlite.DSN(filepath.Join(t.TempDir(), "storm.db"), 0))
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, db.Close()) })
	store, err := sqlite.New(ctx, db, sqlite.Config{})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, store.Close()) })
	var urls []string
	for _, name := range []string{"a", "b"} {
		node, err := app.New(ctx, app.Config{Backend: app.SQLiteBackend(store), Name: name})
		require.NoError(t, err)
		t.Cleanup(func() { require.NoError(t, node.Close()) })
		srv := httptest.NewServer(node.Handler())
		t.Cleanup(srv.Close)
		urls = append(urls, srv.URL)
	}
	return urls
}

// The storm against the real nodes: one 201 per email, the rest 409, and
// the check (GET /staff?email= on every node, backstop_violations 0) passes.
func TestStormRealApp(t *testing.T) {
	t.Parallel()
	urls := realNodes(t)
	code, stdout, stderr := runStorm(t, "-target", strings.Join(urls, ","), "-requests", "400", "-emails", "40", "-concurrency", "16", "-progress", "off")
	require.Regexp(t, `(?m)^  201 created +40$`, stdout, stderr)
	require.Regexp(t, `(?m)^  409 conflict +360  already_taken email 360$`, stdout)
	require.Regexp(t, `(?m)^  5xx +0$`, stdout)
	require.Regexp(t, `(?m)^  transport errors +0$`, stdout)
	require.Equal(t, 0, code, "stdout:\n%s\nstderr:\n%s", stdout, stderr)
	require.Contains(t, stdout, "check: OK: 40 emails on 2 nodes")
}

// The open loop against a real serve (embedded SQLite, in-process
// transport): 400 sign-ups started on schedule over 2 s, 90% of them a
// duplicate email, each answered, the check clean; then a search whose
// bound no step can meet stops after its first rate, tried twice.
func TestStormOpenLoopServe(t *testing.T) {
	t.Parallel()
	url := startServe(t, "-db", "", "-data", filepath.Join(t.TempDir(), "claimbus.db"))
	start := time.Now()
	code, stdout, stderr := runStorm(t, "-target", url, "-rate", "200", "-duration", "2s", "-seed", "5", "-progress", "off")
	require.Equal(t, 0, code, "stdout:\n%s\nstderr:\n%s", stdout, stderr)
	require.GreaterOrEqual(t, time.Since(start), 2*time.Second-10*time.Millisecond, "the last request is due at 399/200 s")
	require.Contains(t, stdout, "storm: open loop, 200 req/s for 2s: 400 POST /staff started on schedule to 1 node, 40 emails (90% duplicates), at most 4096 in flight, timeout 20s, seed 5\n")
	require.Regexp(t, `(?m)^  201 created +40$`, stdout)
	require.Regexp(t, `(?m)^  409 conflict +360  already_taken email 360$`, stdout)
	require.Regexp(t, `(?m)^  5xx +0$`, stdout)
	require.Regexp(t, `(?m)^  dropped +0  due while 4096 were in flight, not sent$`, stdout)
	require.Regexp(t, `(?m)^  took .*, 200 req/s offered, 100% answered \(not 5xx\)$`, stdout)
	require.Regexp(t, `(?m)^  latency p50 [0-9.]+ms  p90 [0-9.]+ms  p99 [0-9.]+ms  max [0-9.]+ms  \(from each request's due time\)$`, stdout)
	require.Regexp(t, `(?m)^  node local \(`+url+`\): 400 sent, 40 created$`, stdout)
	require.Contains(t, stdout, "check: OK: 40 emails on 1 node")

	code, stdout, stderr = runStorm(t, "-target", url, "-find-rate", "-rate", "50", "-duration", "1s", "-p99", "1ns", "-progress", "off")
	require.Equal(t, 0, code, "stdout:\n%s\nstderr:\n%s", stdout, stderr)
	require.Contains(t, stdout, "storm: open loop, search: steps of 1s from 50 req/s, each 1.25 times the one before, until p99 > 1ns")
	require.Regexp(t, `(?m)^ +50 +50 +5 +45 +0 +0 +0 +0 +[0-9.]+ms +[0-9.]+ms +[0-9.]+ms +[0-9.]+ms +100\.0%  beyond\n +50 +50 +5 +45 `, stdout)
	require.Contains(t, stdout, "sustained: none: the first rate, 50 req/s, was beyond p99 1ns or 99% answered")
	require.Contains(t, stdout, "check: OK: every step")
}
