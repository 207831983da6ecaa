package app_test

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/claimbus/claimbus/commands"
	"github.com/claimbus/claimbus/example_app/app"
	"github.com/claimbus/claimbus/internal/testlog"
	"github.com/claimbus/claimbus/middleware"
)

// holdSignUps is a middleware that runs inside the claims and holds every
// CreateStaff whose name is "Slow" until release gives it a turn, deaf to
// its context, as a slow claimant is. held receives the staff id of each
// one it holds, and ended the error of its run once its handler returned
// or was skipped (its after hook runs before the claims are released).
func holdSignUps(release <-chan struct{}, held chan<- string, ended chan<- error) middleware.Middleware {
	slow := func(p *middleware.Pipeline) bool {
		c, ok := p.Command.(*commands.CreateStaff)
		return ok && c.Name == "Slow"
	}
	after := func(_ context.Context, p *middleware.Pipeline) {
		if slow(p) {
			ended <- p.Err()
		}
	}
	return middleware.Hooks{
		OnBeforeDispatch: func(_ context.Context, p *middleware.Pipeline) {
			if slow(p) {
				held <- p.Command.(*commands.CreateStaff).StaffID
				<-release
			}
		},
		OnAfterDispatch: after,
		OnAfterFailure:  after,
	}
}

// A sign-up whose address a slow claimant holds waits for the claim well
// within the request timeout, then answers a rejection that says to try
// again, instead of waiting the whole request out. The slow claimant's
// own request runs out meanwhile, and its command, released later, is not
// applied.
func TestClaimWaitEndsBeforeRequestTimeout(t *testing.T) {
	t.Parallel()
	t.Cleanup(http.DefaultClient.CloseIdleConnections)
	release, held, ended := make(chan struct{}), make(chan string, 1), make(chan error, 1)
	const requestTimeout = 4 * time.Second
	var logs testlog.Buffer
	node, _, url := sqliteNode(t, app.Config{
		RequestTimeout: requestTimeout,
		Middleware:     []middleware.Middleware{holdSignUps(release, held, ended)},
		Logger:         slog.New(slog.NewTextHandler(&logs, nil)),
	})
	defer close(release) // before the cleanups close the node, which waits for the command

	first := make(chan response, 1)
	go func() { first <- postAsync(url+"/staff", `{"staff_id":"s-1","email":"ann@x.org","name":"Slow"}`) }()
	<-held

	start := time.Now()
	r := send(t, "POST", url+"/staff", `{"staff_id":"s-2","email":"ANN@x.org","name":"Ann"}`)
	waited := time.Since(start)
	require.Contains(t, []int{http.StatusGatewayTimeout, http.StatusLocked}, r.status, "%s", r.raw)
	require.Contains(t, strings.ToLower(r.body["message"].(string)), "try again", "%s", r.raw)
	require.Equal(t, "email", r.body["field"], "%s", r.raw)
	require.Less(t, waited, requestTimeout/2, "the claim wait ends well before the request timeout")
	t.Logf("the waiting sign-up answered %d", r.status)
	if r.status == http.StatusGatewayTimeout {
		require.Contains(t, logs.String(), `level=WARN msg="request failed: timeout" method=POST path=/staff`, "a claim timeout is logged")
	}

	out := <-first
	require.Equal(t, http.StatusGatewayTimeout, out.status, "%s", out.raw)
	release <- struct{}{}
	require.ErrorIs(t, <-ended, context.DeadlineExceeded, "the handler was skipped")
	require.Zero(t, staffCount(t, node), "the command whose sender gave up was applied")
}

// A command whose client went away (its request cancelled) before the
// handler started is not applied later.
func TestGaveUpNotApplied(t *testing.T) {
	t.Parallel()
	release, held, ended := make(chan struct{}), make(chan string, 1), make(chan error, 1)
	node, _, _ := sqliteNode(t, app.Config{Middleware: []middleware.Middleware{holdSignUps(release, held, ended)}})
	defer close(release)
	// A server of the node's API that says when a request was served.
	served := make(chan struct{}, 1)
	api := node.Handler()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		api.ServeHTTP(w, r)
		served <- struct{}{}
	}))
	t.Cleanup(srv.Close)

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		req, err := http.NewRequestWithContext(ctx, "POST", srv.URL+"/staff", strings.NewReader(`{"staff_id":"s-1","email":"ann@x.org","name":"Slow"}`))
		if err == nil {
			var resp *http.Response
			if resp, err = srv.Client().Do(req); err == nil {
				resp.Body.Close()
			}
		}
		done <- err
	}()
	<-held
	cancel() // the client gives up
	require.ErrorIs(t, <-done, context.Canceled)
	<-served // the server saw the connection go: the request's context ended
	release <- struct{}{}
	require.ErrorIs(t, <-ended, context.Canceled, "the handler was skipped")
	require.Zero(t, staffCount(t, node), "the command whose client went away was applied")
}

// postAsync posts body to url from another goroutine (no testing.T there)
// and returns the answer.
func postAsync(url, body string) response {
	resp, err := http.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		return response{status: -1, raw: []byte(err.Error())}
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	return response{status: resp.StatusCode, raw: raw}
}

// A sign-up whose claim wait runs out is answered 504 and logged by the
// node, once, as a warning naming the method and path; so is every other
// request answered 504.
func TestClaimTimeoutIsLogged(t *testing.T) {
	t.Parallel()
	t.Cleanup(http.DefaultClient.CloseIdleConnections)
	release, held, ended := make(chan struct{}), make(chan string, 1), make(chan error, 1)
	var logs testlog.Buffer
	_, _, url := sqliteNode(t, app.Config{
		ClaimTimeout: 200 * time.Millisecond,
		Middleware:   []middleware.Middleware{holdSignUps(release, held, ended)},
		Logger:       slog.New(slog.NewTextHandler(&logs, nil)),
	})
	defer close(release)

	first := make(chan response, 1)
	go func() { first <- postAsync(url+"/staff", `{"staff_id":"s-1","email":"ann@x.org","name":"Slow"}`) }()
	<-held
	r := send(t, "POST", url+"/staff", `{"staff_id":"s-2","email":"ann@x.org","name":"Ann"}`)
	require.Equal(t, http.StatusGatewayTimeout, r.status, "%s", r.raw)
	require.Equal(t, "timeout", r.body["code"], "%s", r.raw)
	release <- struct{}{}
	out := <-first
	<-ended

	answered504 := 1
	if out.status == http.StatusGatewayTimeout {
		answered504++ // the held sign-up's own request ran out too
	}
	logged := logs.Lines(`msg="request failed: timeout"`)
	require.Len(t, logged, answered504, "one record per request answered 504:\n%s", logs.String())
	for _, l := range logged {
		require.Contains(t, l, `level=WARN msg="request failed: timeout" method=POST path=/staff error=`)
	}
	require.Len(t, logs.Lines("to claim email"), 1, "the claim timeout, with its cause:\n%s", logs.String())
	require.Empty(t, logs.Lines("timed out"), "no second record of the same timeout")
}
