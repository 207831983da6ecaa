package app_test

import (
	"database/sql"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/claimbus/claimbus/example_app/app"
	"github.com/claimbus/claimbus/internal/testlog"
	"github.com/claimbus/claimbus/internal/testwait"
)

// countTo is a query that counts to n, the work of slowInserts.
func countTo(n int) string {
	return fmt.Sprintf("SELECT count(*) FROM (WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < %d) SELECT x FROM c)", n)
}

// slowInserts makes every insert into staff hold SQLite's write lock for
// about d more (it counts first, as far as this machine counts in d,
// with or without the race detector), so that the node's write capacity
// is known whatever the machine.
func slowInserts(t *testing.T, db *sql.DB, d time.Duration) {
	t.Helper()
	const probe = 10_000
	began := time.Now()
	_, err := db.ExecContext(t.Context(), countTo(probe))
	require.NoError(t, err)
	n := max(1, int(float64(probe)*float64(d)/float64(time.Since(began))))
	_, err = db.ExecContext(t.Context(), `CREATE TRIGGER slow_staff AFTER INSERT ON staff BEGIN `+countTo(n)+`; END`)
	require.NoError(t, err)
}

// Past its write capacity, an embedded node answers every sign-up within
// its claim wait (and the tenth of it the node allows as grace): 201; 503
// saying the database is busy, with Retry-After, when the insert's turn
// at the write lock did not come in time; or 504 when no handler was free
// for it in time. No writer is left waiting seconds in SQLite's busy
// handler. Nothing is lost: every 201 is a row, once, and no 503 wrote
// one.
//
// Not parallel: it measures time, on a machine its own goroutines keep
// busy enough.
func TestSQLiteOverloadAnswersWithinClaimWait(t *testing.T) {
	const (
		claimTimeout = 300 * time.Millisecond
		// margin is what an answer may take beyond the claim wait: the
		// node's grace (30ms), reading the request and writing the answer,
		// on a machine that the test's own goroutines keep busy (about
		// 200ms under the race detector). Before the write gate, answers
		// took up to 5.7s.
		margin  = time.Second
		signUps = 200
		// insert is how long an insert holds the write lock: the sign-ups
		// need five times the claim wait to be written, one at a time.
		insert = 5 * claimTimeout / signUps
	)
	var logs testlog.Buffer
	_, store := sqliteStore(t)
	node, err := app.New(t.Context(), app.Config{
		Backend:      app.SQLiteBackend(store),
		ClaimTimeout: claimTimeout,
		Logger:       slog.New(slog.NewTextHandler(&logs, nil)),
	})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, node.Close()) })
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("the node's log:\n%s", logs.String())
		}
	})
	slowInserts(t, store.DB(), insert)
	// took is how long the node took to answer each sign-up, by staff id:
	// from its handler's start, which the node controls, to its answer.
	var mu sync.Mutex
	took := map[string]time.Duration{}
	api := node.Handler()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		began := time.Now()
		id := r.Header.Get("X-Staff-Id")
		api.ServeHTTP(w, r)
		mu.Lock()
		took[id] = time.Since(began)
		mu.Unlock()
	}))
	t.Cleanup(srv.Close)
	t.Cleanup(srv.Client().CloseIdleConnections)

	type result struct {
		out response
		err error
	}
	results := make([]result, signUps)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range signUps {
		wg.Go(func() {
			<-start
			out, err := exchange("POST", srv.URL+"/staff", fmt.Sprintf(`{"staff_id":"s-%d","email":"user%d@example.org","name":"A"}`, i, i),
				http.Header{"X-Staff-Id": {fmt.Sprintf("s-%d", i)}})
			results[i] = result{out: out, err: err}
		})
	}
	close(start)
	wg.Wait()
	srv.Close() // waits for the handlers: every answer's time is in took
	mu.Lock()
	defer mu.Unlock()

	created := map[string]string{} // staff id -> email
	counts := map[int]int{}
	var slowest time.Duration
	for i, r := range results {
		require.NoError(t, r.err, "sign-up %d", i)
		checkResponse(t, "POST", "/staff", r.out)
		counts[r.out.status]++
		d, ok := took[fmt.Sprintf("s-%d", i)]
		require.True(t, ok, "sign-up %d was not timed", i)
		slowest = max(slowest, d)
		require.LessOrEqual(t, d, claimTimeout+margin, "sign-up %d answered %d after %v: %s", i, r.out.status, d, r.out.raw)
		switch r.out.status {
		case http.StatusCreated:
			created[fmt.Sprintf("s-%d", i)] = fmt.Sprintf("user%d@example.org", i)
		case http.StatusServiceUnavailable:
			require.Equal(t, "unavailable", r.out.body["code"], "%s", r.out.raw)
			require.Contains(t, r.out.body["message"], "busy", "%s", r.out.raw)
			require.Equal(t, "1", r.out.header.Get("Retry-After"), "%s", r.out.raw)
		case http.StatusGatewayTimeout:
			require.Equal(t, "timeout", r.out.body["code"], "%s", r.out.raw)
		default:
			t.Fatalf("sign-up %d answered %d: %s", i, r.out.status, r.out.raw)
		}
	}
	t.Logf("%d sign-ups at once, claim wait %v: %v, slowest answer %v", signUps, claimTimeout, counts, slowest)
	require.NotZero(t, counts[http.StatusServiceUnavailable], "the node was not past its capacity: the test proves nothing")

	// Every 201 is a row; a 503 wrote nothing (a 504 may have: its
	// answer came before its outcome).
	rows, err := store.DB().QueryContext(t.Context(), `SELECT staff_id, email FROM staff`)
	require.NoError(t, err)
	defer rows.Close()
	stored, emails := map[string]string{}, map[string]bool{}
	for rows.Next() {
		var id, email string
		require.NoError(t, rows.Scan(&id, &email))
		require.NotContains(t, stored, id)
		require.False(t, emails[email], "%s stored twice", email)
		stored[id], emails[email] = email, true
	}
	require.NoError(t, rows.Err())
	for id, email := range created {
		require.Equal(t, email, stored[id], "sign-up %s answered 201 and is not stored", id)
	}
	for id := range stored {
		var i int
		_, err := fmt.Sscanf(id, "s-%d", &i)
		require.NoError(t, err)
		require.Contains(t, []int{http.StatusCreated, http.StatusGatewayTimeout}, results[i].out.status,
			"sign-up %s is stored and was answered %s", id, results[i].out.raw)
	}
	require.Zero(t, node.BackstopViolations())

	// Once the storm has passed, a sign-up goes through: no turn was
	// left taken. A command answered 504 after its handler started runs
	// on (its answer came before its outcome): the storm has passed when
	// no claim or write turn is held or waited for. Every request's
	// deadline has passed, so no handler starts after that.
	testwait.Until(t, 10*time.Second, time.Millisecond, func() bool {
		st := store.Stats()
		return st.Held == 0 && st.Waiting == 0
	}, "the handlers still running after their 504s end")
	srv = httptest.NewServer(node.Handler())
	defer srv.Close()
	r := send(t, "POST", srv.URL+"/staff", `{"staff_id":"after","email":"after@example.org","name":"A"}`)
	require.Equal(t, http.StatusCreated, r.status, "%s", r.raw)
}
