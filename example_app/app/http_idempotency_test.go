package app_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/claimbus/claimbus/commands"
	"github.com/claimbus/claimbus/example_app/app"
	"github.com/claimbus/claimbus/internal/pgtest"
	"github.com/claimbus/claimbus/middleware"
)

// countSignUps returns a configuration whose middleware, which runs right
// before the handler (inside the claims), counts the CreateStaff that
// reach it.
func countSignUps(cfg app.Config, runs *atomic.Int64) app.Config {
	cfg.Middleware = []middleware.Middleware{middleware.Hooks{OnBeforeDispatch: func(_ context.Context, p *middleware.Pipeline) {
		if _, ok := p.Command.(*commands.CreateStaff); ok {
			runs.Add(1)
		}
	}}}
	return cfg
}

// repeatAtOnce sends n POST /staff with key and body at once, spread over
// urls, and requires that they all get the same status and body, which it
// returns.
func repeatAtOnce(t *testing.T, urls []string, n int, key, body string) response {
	t.Helper()
	answers := make([]response, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			answers[i], errs[i] = postStaffAsync(urls[i%len(urls)], key, body)
		}()
	}
	wg.Wait()
	for i := range n {
		checkStaff(t, urls[i%len(urls)], answers[i], errs[i])
	}
	for _, a := range answers[1:] {
		require.Equal(t, answers[0].status, a.status, "%s / %s", answers[0].raw, a.raw)
		require.Equal(t, string(answers[0].raw), string(a.raw))
	}
	return answers[0]
}

// idempotencyStory runs the Idempotency-Key checks over urls, the nodes of
// one database whose sign-ups runs counts: 50 repeats at once run the
// handler once and all get its answer; a repeat with another body is 409
// idempotency_conflict; a rejection is the stored answer of its key too.
func idempotencyStory(t *testing.T, urls []string, runs *atomic.Int64) {
	t.Helper()
	const body = `{"staff_id":"s-1","email":"Ann@Example.org","name":"Ann"}`
	first := repeatAtOnce(t, urls, 50, "key-1", body)
	require.Equal(t, http.StatusCreated, first.status, "%s", first.raw)
	require.JSONEq(t, `{"staff_id":"s-1","email":"ann@example.org","name":"Ann"}`, string(first.raw))
	require.EqualValues(t, 1, runs.Load(), "the handler ran once for 50 repeats")

	later := postStaff(t, urls[len(urls)-1], "key-1", body)
	require.Equal(t, first.status, later.status, "a later repeat gets the same status")
	require.Equal(t, string(first.raw), string(later.raw))

	other := postStaff(t, urls[0], "key-1", `{"staff_id":"s-1","email":"ann@example.org","name":"Ann Lee"}`)
	require.Equal(t, http.StatusConflict, other.status, "%s", other.raw)
	require.Equal(t, middleware.CodeIdempotencyConflict, decodeCode(t, other.raw))
	require.EqualValues(t, 1, runs.Load(), "nor does a conflicting repeat run")

	// A rejection is a final answer: stored, and answered again, unlike a
	// new request with no key, which runs.
	taken := repeatAtOnce(t, urls, 10, "key-2", `{"staff_id":"s-2","email":"ann@example.org","name":"Ann"}`)
	require.Equal(t, http.StatusConflict, taken.status, "%s", taken.raw)
	require.Equal(t, middleware.CodeAlreadyTaken, decodeCode(t, taken.raw))
	require.EqualValues(t, 1, runs.Load(), "already_taken is answered by the claims, before the handler")
}

// Every repeat of a POST /staff with one Idempotency-Key, at once or
// later, gets the first answer (status and body) and the handler runs
// once; another body under the key is 409 idempotency_conflict. On each
// backend in the table model, and over two PostgreSQL nodes in the events
// model.
func TestIdempotencyKey(t *testing.T) {
	t.Parallel()
	t.Run("table/sqlite", func(t *testing.T) {
		t.Parallel()
		var runs atomic.Int64
		_, _, url := sqliteNode(t, countSignUps(app.Config{}, &runs))
		idempotencyStory(t, []string{url}, &runs)
	})
	t.Run("table/postgres", func(t *testing.T) {
		t.Parallel()
		var runs atomic.Int64
		_, url := pgNode(t, pgtest.DSN(t), "pg", "inprocess", countSignUps(app.Config{}, &runs))
		idempotencyStory(t, []string{url}, &runs)
	})
	t.Run("events/postgres two nodes", func(t *testing.T) {
		t.Parallel()
		var runs atomic.Int64
		dsn := pgtest.DSN(t)
		a, aURL := pgNode(t, dsn, "pg-a", "inprocess", countSignUps(eventsConfig(false), &runs))
		b, bURL := pgNode(t, dsn, "pg-b", "inprocess", countSignUps(eventsConfig(false), &runs))
		idempotencyStory(t, []string{aURL, bURL}, &runs)
		require.NoError(t, a.WaitProjected(t.Context()))
		require.NoError(t, b.WaitProjected(t.Context()))
		n, err := a.StaffRegistrations(t.Context(), "")
		require.NoError(t, err)
		require.Equal(t, 1, n, "one StaffRegistered")
	})
}

// An Idempotency-Key that cannot be one is answered 400 bad_request naming
// the header, before anything runs.
func TestIdempotencyKeyInvalid(t *testing.T) {
	t.Parallel()
	var runs atomic.Int64
	node, _, _ := sqliteNode(t, countSignUps(app.Config{}, &runs))
	h := node.Handler()
	for name, keys := range map[string][]string{
		"too long":          {strings.Repeat("k", 128+1)},
		"control character": {"key\x01"},
		"tab":               {"key\tx"},
		"space":             {"key x"},
		"not ASCII":         {"ключ"},
		"empty":             {""},
		"twice":             {"a", "b"},
	} {
		req := httptest.NewRequest(http.MethodPost, "/staff", strings.NewReader(`{"staff_id":"s-1","email":"ann@example.org","name":"Ann"}`))
		req.Header[app.IdempotencyKeyHeader] = keys
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		require.Equal(t, http.StatusBadRequest, w.Code, "%s: %s", name, w.Body)
		require.Equal(t, app.CodeBadRequest, decodeCode(t, w.Body.Bytes()), name)
		require.Contains(t, w.Body.String(), `"field":"Idempotency-Key"`, name)
		requireNoInternals(t, w.Body.Bytes(), name)
	}
	require.Zero(t, runs.Load())
	ok := httptest.NewRequest(http.MethodPost, "/staff", strings.NewReader(`{"staff_id":"s-1","email":"ann@example.org","name":"Ann"}`))
	ok.Header.Set(app.IdempotencyKeyHeader, strings.Repeat("k", 128))
	w := httptest.NewRecorder()
	h.ServeHTTP(w, ok)
	require.Equal(t, http.StatusCreated, w.Code, "a key of the limit: %s", w.Body)

	// The key is the header's, never the body's.
	body := httptest.NewRequest(http.MethodPost, "/staff", strings.NewReader(`{"staff_id":"s-2","email":"bob@example.org","name":"Bob","idempotency_key":"k"}`))
	w = httptest.NewRecorder()
	h.ServeHTTP(w, body)
	require.Equal(t, http.StatusBadRequest, w.Code, "%s", w.Body)
}
