package app_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/claimbus/claimbus/example_app/app"
	"github.com/claimbus/claimbus/lockstore/sqlite"
)

// While another process holds an embedded node's database for writing
// past the busy timeout, a sign-up is answered 503 with Retry-After and a
// message that says the database is busy, not unreachable; once the
// writer is gone, sign-ups go through again.
func TestSQLiteBusyAnswers503(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "app.db")
	db, err := sql.Open("sqlite", sqlite.DSN(path, 100*time.Millisecond))
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, db.Close()) })
	ctx := context.Background()
	store, err := sqlite.New(ctx, db, sqlite.Config{})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, store.Close()) })
	node, err := app.New(ctx, app.Config{Backend: app.SQLiteBackend(store)})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, node.Close()) })
	srv := httptest.NewServer(node.Handler())
	t.Cleanup(srv.Close)

	// The other process: a connection of its own holding the write lock.
	other, err := sql.Open("sqlite", sqlite.DSN(path, 0))
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, other.Close()) })
	conn, err := other.Conn(ctx)
	require.NoError(t, err)
	_, err = conn.ExecContext(ctx, "BEGIN IMMEDIATE")
	require.NoError(t, err)

	signUp := func(id string) (int, http.Header, map[string]string) {
		resp, err := srv.Client().Post(srv.URL+"/staff", "application/json",
			strings.NewReader(`{"staff_id":"`+id+`","email":"`+id+`@example.org","name":"A"}`))
		require.NoError(t, err)
		defer resp.Body.Close()
		var body map[string]string
		require.NoError(t, json.NewDecoder(resp.Body).Decode(&body))
		return resp.StatusCode, resp.Header, body
	}
	status, header, body := signUp("s-1")
	require.Equal(t, http.StatusServiceUnavailable, status)
	require.Equal(t, "1", header.Get("Retry-After"))
	require.Equal(t, "unavailable", body["code"])
	require.Contains(t, body["message"], "busy")

	_, err = conn.ExecContext(ctx, "ROLLBACK")
	require.NoError(t, err)
	require.NoError(t, conn.Close())
	status, _, _ = signUp("s-2")
	require.Equal(t, http.StatusCreated, status)
}
