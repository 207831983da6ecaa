package app_test

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/claimbus/claimbus/bus"
	"github.com/claimbus/claimbus/example_app/app"
	"github.com/claimbus/claimbus/internal/pgtest"
	"github.com/claimbus/claimbus/lockstore"
	"github.com/claimbus/claimbus/lockstore/sqlite"
	"github.com/claimbus/claimbus/middleware"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// sqliteNode starts a node configured by cfg on a fresh SQLite database
// (its Backend), served by httptest.
func sqliteNode(t testing.TB, cfg app.Config) (*app.Node, *sqlite.Store, string) {
	t.Helper()
	ctx := context.Background()
	_, store := sqliteStore(t)
	cfg.Backend = app.SQLiteBackend(store)
	node, err := app.New(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, node.Close()) })
	srv := httptest.NewServer(node.Handler())
	t.Cleanup(srv.Close)
	t.Cleanup(srv.Client().CloseIdleConnections)
	return node, store, srv.URL
}

// sqliteStore opens a fresh SQLite database file and its lock store, both
// closed when the test ends.
func sqliteStore(t testing.TB) (*sql.DB, *sqlite.Store) {
	t.Helper()
	db, err := sql.Open("sqlite", sqlite.DSN(filepath.Join(t.TempDir(), "app.db"), 0))
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, db.Close()) })
	store, err := sqlite.New(context.Background(), db, sqlite.Config{})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, store.Close()) })
	return db, store
}

// call sends a request with body (raw when a string, JSON otherwise) and
// returns the status and the decoded JSON answer.
func call(t *testing.T, method, url string, body any) (int, map[string]any) {
	t.Helper()
	var r io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		r = strings.NewReader(b)
	default:
		raw, err := json.Marshal(b)
		require.NoError(t, err)
		r = bytes.NewReader(raw)
	}
	req, err := http.NewRequest(method, url, r)
	require.NoError(t, err)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, "application/json", resp.Header.Get("Content-Type"))
	var out map[string]any
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&out))
	return resp.StatusCode, out
}

// The HTTP API answers each outcome with its status and a structured body.
func TestHTTPAPI(t *testing.T) {
	t.Cleanup(http.DefaultClient.CloseIdleConnections)
	node, store, url := sqliteNode(t, app.Config{Name: "test"})

	type want struct {
		status int
		body   map[string]any // fields expected in the answer
	}
	steps := []struct {
		name         string
		method, path string
		body         any
		want         want
	}{
		{"health", "GET", "/healthz", nil, want{200, map[string]any{"status": "ok", "node": "test", "backend": "sqlite"}}},

		{"staff created, email normalised", "POST", "/staff", map[string]string{"staff_id": "s-1", "email": " Ann@Example.ORG ", "name": "Ann"},
			want{201, map[string]any{"staff_id": "s-1", "email": "ann@example.org", "name": "Ann"}}},
		{"same email in another case", "POST", "/staff", map[string]string{"staff_id": "s-2", "email": "ANN@example.org", "name": "Ann"},
			want{409, map[string]any{"code": "already_taken", "field": "email"}}},
		{"same staff id", "POST", "/staff", map[string]string{"staff_id": "s-1", "email": "bob@example.org", "name": "Bob"},
			want{409, map[string]any{"code": "already_taken", "field": "staff_id"}}},
		{"invalid email", "POST", "/staff", map[string]string{"staff_id": "s-3", "email": "Bob <bob@example.org>", "name": "Bob"},
			want{422, map[string]any{"code": "invalid", "field": "email"}}},
		{"missing name", "POST", "/staff", map[string]string{"staff_id": "s-3", "email": "bob@example.org"},
			want{422, map[string]any{"code": "invalid", "field": "name"}}},
		{"not JSON", "POST", "/staff", "{", want{400, map[string]any{"code": "bad_request"}}},
		{"unknown field", "POST", "/staff", `{"staff_id":"s-3","mail":"x@y.z"}`, want{400, map[string]any{"code": "bad_request"}}},
		{"two values", "POST", "/staff", `{"staff_id":"s-3"} {}`, want{400, map[string]any{"code": "bad_request"}}},

		{"wallet", "POST", "/wallets", map[string]any{"wallet_id": "alice", "currency": "EUR", "balance": 100_00}, want{201, map[string]any{"balance": float64(100_00)}}},
		{"wallet 2", "POST", "/wallets", map[string]any{"wallet_id": "bob", "currency": "EUR", "balance": 0}, want{201, nil}},
		{"wallet in dollars", "POST", "/wallets", map[string]any{"wallet_id": "carl", "currency": "USD", "balance": 0}, want{201, nil}},
		{"wallet again", "POST", "/wallets", map[string]any{"wallet_id": "alice", "currency": "EUR"}, want{409, map[string]any{"code": "already_taken", "field": "wallet_id"}}},
		{"wallet bad currency", "POST", "/wallets", map[string]any{"wallet_id": "dora", "currency": "eur"}, want{422, map[string]any{"code": "invalid", "field": "currency"}}},
		{"wallet negative", "POST", "/wallets", map[string]any{"wallet_id": "dora", "currency": "EUR", "balance": -1}, want{422, map[string]any{"field": "balance"}}},
		{"no such wallet", "GET", "/wallets/zed", nil, want{404, map[string]any{"code": "not_found", "field": "wallet_id"}}},

		{"transfer from nowhere", "POST", "/transfers", map[string]any{"transfer_id": "t-1", "from_wallet_id": "zed", "to_wallet_id": "bob", "amount": 10_00, "currency": "EUR"},
			want{404, map[string]any{"code": "not_found", "field": "from_wallet_id"}}},
		{"transfer across currencies", "POST", "/transfers", map[string]any{"transfer_id": "t-1", "from_wallet_id": "alice", "to_wallet_id": "carl", "amount": 10_00, "currency": "EUR"},
			want{422, map[string]any{"code": "invalid", "field": "currency"}}},
		{"transfer to itself", "POST", "/transfers", map[string]any{"transfer_id": "t-1", "from_wallet_id": "alice", "to_wallet_id": "alice", "amount": 10_00, "currency": "EUR"},
			want{422, map[string]any{"code": "invalid", "field": "to_wallet_id"}}},
		{"transfer opened", "POST", "/transfers", map[string]any{"transfer_id": "t-1", "from_wallet_id": "alice", "to_wallet_id": "bob", "amount": 30_00, "currency": "EUR"},
			want{201, map[string]any{"state": "open", "amount": float64(30_00)}}},
		{"transfer id taken", "POST", "/transfers", map[string]any{"transfer_id": "t-1", "from_wallet_id": "alice", "to_wallet_id": "bob", "amount": 5_00, "currency": "EUR"},
			want{409, map[string]any{"code": "already_taken", "field": "transfer_id"}}},
		{"too big a transfer", "POST", "/transfers", map[string]any{"transfer_id": "t-2", "from_wallet_id": "alice", "to_wallet_id": "bob", "amount": 500_00, "currency": "EUR"},
			want{201, nil}},
		{"insufficient funds", "POST", "/transfers/t-2/approve", nil, want{422, map[string]any{"code": "insufficient_funds", "field": "amount"}}},
		{"still open", "GET", "/transfers/t-2", nil, want{200, map[string]any{"state": "open"}}},
		{"approved", "POST", "/transfers/t-1/approve", nil, want{200, map[string]any{"state": "approved"}}},
		{"approved twice", "POST", "/transfers/t-1/approve", nil, want{409, map[string]any{"code": "not_open"}}},
		{"cancel approved", "POST", "/transfers/t-1/cancel", nil, want{409, map[string]any{"code": "not_open"}}},
		{"cancelled with reason", "POST", "/transfers/t-2/cancel", map[string]string{"reason": "too much"}, want{200, map[string]any{"state": "cancelled", "reason": "too much"}}},
		{"no such transfer", "POST", "/transfers/t-9/approve", nil, want{404, map[string]any{"code": "not_found", "field": "transfer_id"}}},
		{"balance moved", "GET", "/wallets/alice", nil, want{200, map[string]any{"balance": float64(70_00)}}},
		{"balance arrived", "GET", "/wallets/bob", nil, want{200, map[string]any{"balance": float64(30_00)}}},

		{"lobby", "POST", "/lobbies", map[string]any{"lobby_id": "l-1", "words": []string{"Apple", "river"}}, want{201, map[string]any{"words": float64(2), "words_left": float64(2)}}},
		{"lobby twice a word", "POST", "/lobbies", map[string]any{"lobby_id": "l-2", "words": []string{"apple", "APPLE"}}, want{422, map[string]any{"field": "words"}}},
		{"wrong guess", "POST", "/lobbies/l-1/guesses", map[string]string{"word": "stone"}, want{200, map[string]any{"correct": false, "won": false, "words_left": float64(2)}}},
		{"winning guess", "POST", "/lobbies/l-1/guesses", map[string]string{"word": "APPLE"}, want{200, map[string]any{"word": "apple", "correct": true, "won": true, "words_left": float64(1)}}},
		{"late guess", "POST", "/lobbies/l-1/guesses", map[string]string{"word": "apple"}, want{200, map[string]any{"correct": true, "won": false, "words_left": float64(1)}}},
		{"not a word", "POST", "/lobbies/l-1/guesses", map[string]string{"word": "r2d2"}, want{422, map[string]any{"code": "invalid", "field": "word"}}},
		{"no such lobby", "POST", "/lobbies/l-9/guesses", map[string]string{"word": "apple"}, want{404, map[string]any{"code": "not_found", "field": "lobby_id"}}},
	}
	for _, s := range steps {
		status, body := call(t, s.method, url+s.path, s.body)
		require.Equal(t, s.want.status, status, "%s: %v", s.name, body)
		for k, v := range s.want.body {
			require.Equal(t, v, body[k], "%s: %s in %v", s.name, k, body)
		}
	}

	// A transfer whose lock is held answers 423.
	l, err := store.TryLock(context.Background(), lockstore.Key{Namespace: app.NamespaceTransfer, ID: "t-3"})
	require.NoError(t, err)
	status, body := call(t, "POST", url+"/transfers/t-3/cancel", nil)
	require.Equal(t, http.StatusLocked, status)
	require.Equal(t, "locked", body["code"])
	require.NoError(t, l.Release(context.Background()))

	require.Zero(t, node.Backstops())
	n, err := node.StaffCount(context.Background())
	require.NoError(t, err)
	require.Equal(t, 1, n)
}

// A command that outlives the request timeout is answered 504.
func TestHTTPTimeout(t *testing.T) {
	t.Cleanup(http.DefaultClient.CloseIdleConnections)
	release := make(chan struct{})
	slow := middleware.Hooks{OnBeforeDispatch: func(ctx context.Context, p *middleware.Pipeline) { <-release }}
	_, _, url := sqliteNode(t, app.Config{Middleware: []middleware.Middleware{slow}, RequestTimeout: 50 * time.Millisecond})
	defer close(release) // before the cleanups close the node, which waits for the command

	status, body := call(t, "POST", url+"/staff", map[string]string{"staff_id": "s-1", "email": "a@b.org", "name": "A"})
	require.Equal(t, http.StatusGatewayTimeout, status)
	require.Equal(t, "timeout", body["code"])
}

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	require.ErrorIs(t, app.Config{}.Validate(), app.ErrNilBackend)
	err := app.Config{
		Bus:            bus.Config{Middleware: []middleware.Middleware{middleware.Validate()}},
		ClaimTimeout:   -1,
		RequestTimeout: -1,
	}.Validate()
	require.ErrorIs(t, err, app.ErrNilBackend)
	for _, want := range []string{"Config.Bus.Middleware", "Config.ClaimTimeout", "Config.RequestTimeout"} {
		require.ErrorContains(t, err, want)
	}
	err = app.Config{ClaimTimeout: 15 * time.Second}.Validate()
	require.ErrorContains(t, err, "Config.ClaimTimeout (15s) is over half the request timeout (20s)")
	err = app.Config{ClaimTimeout: 2 * time.Second, RequestTimeout: 3 * time.Second}.Validate()
	require.ErrorContains(t, err, "Config.ClaimTimeout (2s) is over half the request timeout (3s)")
	require.NotContains(t, app.Config{ClaimTimeout: 10 * time.Second}.Validate().Error(), "ClaimTimeout")
	_, err = app.New(context.Background(), app.Config{})
	require.ErrorIs(t, err, app.ErrNilBackend)
	require.ErrorContains(t, app.Migrate(context.Background(), nil), "nil Backend")
}
