package app_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/claimbus/claimbus/bus"
	"github.com/claimbus/claimbus/bus/sqltransport"
	"github.com/claimbus/claimbus/example_app/app"
	"github.com/claimbus/claimbus/internal/pgtest"
	"github.com/claimbus/claimbus/lockstore/postgres"
)

// pgNode starts a node configured by cfg on the PostgreSQL database dsn
// names (its Backend, and with transport "postgres" its bus transport),
// served by httptest. Everything closes when the test ends.
func pgNode(t testing.TB, dsn, name, transport string, cfg app.Config) (*app.Node, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	pool := pgtest.Connect(t, dsn, pgtest.PoolConfig{MaxConns: 20, ApplicationName: name})
	store, err := postgres.New(ctx, pool, postgres.Config{Namespaces: app.Namespaces(), Node: name})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, store.Close()) })
	if transport == "postgres" {
		tpool := pgtest.Connect(t, dsn, pgtest.PoolConfig{MaxConns: 16, ApplicationName: name + "-bus"})
		tr, err := sqltransport.New(ctx, tpool, sqltransport.Config{NodeID: name})
		require.NoError(t, err)
		t.Cleanup(func() { require.NoError(t, tr.Close()) })
		cfg.Bus = tr.BusConfig(bus.Config{})
	}
	cfg.Backend, cfg.Name = app.PostgresBackend(store), name
	node, err := app.New(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, node.Close()) })
	srv := httptest.NewServer(node.Handler())
	t.Cleanup(srv.Close)
	t.Cleanup(srv.Client().CloseIdleConnections)
	return node, srv.URL
}

// onEachBackend runs test as a parallel subtest on a fresh SQLite node and
// on a fresh PostgreSQL node, each given by its base URL.
func onEachBackend(t *testing.T, cfg app.Config, test func(t *testing.T, node *app.Node, url string)) {
	t.Helper()
	t.Run("sqlite", func(t *testing.T) {
		t.Parallel()
		node, _, url := sqliteNode(t, cfg)
		test(t, node, url)
	})
	t.Run("postgres", func(t *testing.T) {
		t.Parallel()
		node, url := pgNode(t, pgtest.DSN(t), "pg", "inprocess", cfg)
		test(t, node, url)
	})
}

// response is an answer of the API as it came: status, headers, raw body.
type response struct {
	status int
	header http.Header
	raw    []byte
	body   map[string]any // the body when it is a JSON object
}

// noRedirects is a client that reports a redirect instead of following it.
var noRedirects = &http.Client{
	CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	Timeout:       time.Minute,
}

// send sends a request with a raw body ("" for none) to target, a full
// URL whose path is sent as written (no cleaning, no re-escaping), and
// requires a JSON answer, without internal detail when it is a failure.
func send(t *testing.T, method, target, body string) response {
	t.Helper()
	return sendWith(t, method, target, body, nil)
}

// sendWith is send with the request's headers set to header.
func sendWith(t *testing.T, method, target, body string, header http.Header) response {
	t.Helper()
	out, err := exchange(method, target, body, header)
	require.NoError(t, err)
	checkResponse(t, method, target, out)
	return out
}

// exchange sends one request and reads its answer, asserting nothing, so
// that a goroutine other than the test's can call it; the test's goroutine
// then checks the error and calls checkResponse.
func exchange(method, target, body string, header http.Header) (response, error) {
	var r io.Reader
	if body != "" {
		r = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, target, r)
	if err != nil {
		return response{}, err
	}
	for k, v := range header {
		req.Header[k] = v
	}
	resp, err := noRedirects.Do(req)
	if err != nil {
		return response{}, err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return response{}, err
	}
	out := response{status: resp.StatusCode, header: resp.Header, raw: raw}
	if method != http.MethodHead {
		_ = json.Unmarshal(raw, &out.body)
	}
	return out, nil
}

// checkResponse asserts what every answer of the API is: JSON, and free of
// internals when it is an error.
func checkResponse(t *testing.T, method, target string, out response) {
	t.Helper()
	require.Equal(t, "application/json", out.header.Get("Content-Type"), "%s %s: %d %q", method, target, out.status, out.raw)
	if method != http.MethodHead {
		require.True(t, json.Valid(out.raw), "%s %s: not JSON: %q", method, target, out.raw)
	}
	if out.status >= 400 {
		requireNoInternals(t, out.raw, method+" "+target)
	}
}

// goName matches a qualified Go name, such as commands.CreateStaff or
// *pgconn.PgError, as encoding/json and %T print them.
var goName = regexp.MustCompile(`\*?\b[a-z][a-z0-9]*\.[A-Z][A-Za-z0-9]*\b`)

// internals are strings that tell of the implementation: the driver, the
// server's errors, Go's runtime.
var internals = []string{
	"pgx", "pgconn", "sqlstate", "sqlite_", "sql logic", "sql:", "goroutine", "panic", ".go:",
	"user=", "database=", "postgres@", "127.0.0.1", "dial tcp", "connection refused",
	"go struct", "json:", "unmarshal", "invalid character", "utf8", "u+fffd",
}

// requireNoInternals fails when an answer's body tells of the
// implementation: a Go type, a driver message, a host, a stack.
func requireNoInternals(t testing.TB, raw []byte, what string, also ...string) {
	t.Helper()
	lower := strings.ToLower(string(raw))
	for _, s := range append(internals, also...) {
		require.NotContains(t, lower, strings.ToLower(s), "%s: the body %q tells of the implementation", what, raw)
	}
	require.False(t, goName.Match(raw), "%s: the body %q names a Go type (%s)", what, raw, goName.Find(raw))
	require.NotContains(t, string(raw), "\ufffd", "%s: the body %q holds U+FFFD", what, raw)
}

// seed creates the wallets alice (100.00 EUR) and bob, the open transfer
// t-1 between them and the lobby l-1, through the API.
func seed(t *testing.T, url string) {
	t.Helper()
	for _, s := range []struct{ path, body string }{
		{"/wallets", `{"wallet_id":"alice","currency":"EUR","balance":10000}`},
		{"/wallets", `{"wallet_id":"bob","currency":"EUR","balance":0}`},
		{"/transfers", `{"transfer_id":"t-1","from_wallet_id":"alice","to_wallet_id":"bob","amount":100,"currency":"EUR"}`},
		{"/lobbies", `{"lobby_id":"l-1","words":["apple","river"]}`},
	} {
		r := send(t, "POST", url+s.path, s.body)
		require.Equal(t, http.StatusCreated, r.status, "seed %s: %s", s.path, r.raw)
	}
}

// staffCount returns how many members of staff node's database holds.
func staffCount(t *testing.T, node *app.Node) int {
	t.Helper()
	n, err := node.StaffCount(t.Context())
	require.NoError(t, err)
	return n
}
