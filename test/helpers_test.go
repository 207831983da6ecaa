package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/claimbus/claimbus/internal/testwait"
)

// deadline bounds every wait of these tests for an observable state.
const deadline = 30 * time.Second

// newClient returns an HTTP client whose connections are closed when the
// test ends.
func newClient(t testing.TB) *http.Client {
	tr := &http.Transport{MaxIdleConnsPerHost: 256, DisableCompression: true}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: deadline}
}

// answer is an HTTP response: its status and JSON body.
type answer struct {
	Status int
	Body   map[string]any
	Err    error // the request failed: no response
}

// str returns the body's field as a string.
func (a answer) str(field string) string {
	s, _ := a.Body[field].(string)
	return s
}

// post sends body as JSON and decodes the JSON answer.
func post(ctx context.Context, c *http.Client, url string, body any) answer {
	return postWith(ctx, c, url, nil, body)
}

// postWith is post with the headers in header added.
func postWith(ctx context.Context, c *http.Client, url string, header http.Header, body any) answer {
	b, err := json.Marshal(body)
	if err != nil {
		return answer{Err: err}
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(b))
	if err != nil {
		return answer{Err: err}
	}
	req.Header.Set("Content-Type", "application/json")
	for k, v := range header {
		req.Header[k] = v
	}
	return do(c, req)
}

// get fetches url and decodes the JSON answer.
func get(ctx context.Context, c *http.Client, url string) answer {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return answer{Err: err}
	}
	return do(c, req)
}

func do(c *http.Client, req *http.Request) answer {
	resp, err := c.Do(req)
	if err != nil {
		return answer{Err: err}
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return answer{Status: resp.StatusCode, Err: err}
	}
	a := answer{Status: resp.StatusCode}
	if err := json.Unmarshal(raw, &a.Body); err != nil {
		a.Err = fmt.Errorf("status %d, body %q: %w", resp.StatusCode, raw, err)
	}
	return a
}

// waitHealthy polls url's /healthz until it answers 200.
func waitHealthy(t testing.TB, c *http.Client, url string) {
	t.Helper()
	eventually(t, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		a := get(ctx, c, url+"/healthz")
		return a.Err == nil && a.Status == http.StatusOK && a.str("status") == "ok"
	}, "%s/healthz answers 200", url)
}

// eventually polls cond, on the test's goroutine (its conditions assert
// on t), until it holds, and fails the test when it still does not after
// deadline.
func eventually(t testing.TB, cond func() bool, format string, args ...any) {
	t.Helper()
	testwait.Until(t, deadline, 10*time.Millisecond, cond, format, args...)
}

// signup is one CreateStaff of a storm.
type signup struct {
	StaffID string `json:"staff_id"`
	Email   string `json:"email"`
	Name    string `json:"name"`
	// base is the address in its normal form.
	base string
}

// signups returns copies sign-ups of each of emails addresses, every copy
// a different spelling of the address (case, surrounding spaces), each
// with its own staff id, interleaved so that copies of one address are
// spread over the nodes.
func signups(prefix string, emails, copies int) []signup {
	out := make([]signup, 0, emails*copies)
	for c := range copies {
		for e := range emails {
			local, domain := fmt.Sprintf("%s%02d", prefix, e), "example.org"
			var email string
			switch c % 5 {
			case 0:
				email = local + "@" + domain
			case 1:
				email = strings.ToUpper(local + "@" + domain)
			case 2:
				email = strings.ToUpper(local[:1]) + local[1:] + "@" + strings.ToUpper(domain)
			case 3:
				email = " " + local + "@Example.Org "
			case 4:
				email = local + "@EXAMPLE.org"
			}
			out = append(out, signup{
				StaffID: fmt.Sprintf("%s-%02d-%02d", prefix, e, c),
				Email:   email,
				Name:    "Person " + local,
				base:    local + "@" + domain,
			})
		}
	}
	return out
}

// outcome is the answer to one sign-up.
type outcome struct {
	signup
	node   int // index of the node it was sent to
	answer answer
}

// stormConfig tunes storm.
type stormConfig struct {
	// workers bounds the requests in flight; 0 sends all at once.
	workers int
	// after, when set, is called once after that many answers.
	afterN int
	after  func()
	// nodeOf picks the node of the i-th sign-up; default i mod the nodes.
	nodeOf func(i int) int
}

// storm posts every sign-up to /staff of the node urls (round robin),
// at once or through cfg.workers workers, and returns the outcomes in the
// order of the sign-ups.
func storm(ctx context.Context, c *http.Client, urls []string, ups []signup, cfg stormConfig) []outcome {
	out := make([]outcome, len(ups))
	workers := cfg.workers
	if workers <= 0 {
		workers = len(ups)
	}
	nodeOf := cfg.nodeOf
	if nodeOf == nil {
		nodeOf = func(i int) int { return i % len(urls) }
	}
	var answered atomic.Int64
	var once sync.Once
	next := make(chan int)
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for i := range next {
				n := nodeOf(i)
				out[i] = outcome{signup: ups[i], node: n, answer: post(ctx, c, urls[n]+"/staff", ups[i])}
				if cfg.after != nil && answered.Add(1) == int64(cfg.afterN) {
					once.Do(cfg.after)
				}
			}
		})
	}
	for i := range ups {
		next <- i
	}
	close(next)
	wg.Wait()
	return out
}

// staffRows returns the staff rows as email -> staff id, and their count.
func staffRows(t testing.TB, pool *pgxpool.Pool) (map[string]string, int) {
	t.Helper()
	rows, err := pool.Query(context.Background(), `SELECT email, staff_id FROM staff`)
	require.NoError(t, err)
	byEmail := map[string]string{}
	n := 0
	for rows.Next() {
		var email, id string
		require.NoError(t, rows.Scan(&email, &id))
		byEmail[email] = id
		n++
	}
	require.NoError(t, rows.Err())
	return byEmail, n
}

// requireOneRowPerEmail checks that a storm of sign-ups answered every
// request, created exactly one member per address (the first request whose
// answer is 201), and rejected every other copy with 409 already_taken
// naming the field "email"; and that the table agrees: one row per address,
// the one the 201 answered.
func requireOneRowPerEmail(t testing.TB, pool *pgxpool.Pool, out []outcome, emails int) {
	t.Helper()
	created := map[string]string{}
	conflicts := 0
	for _, o := range out {
		a := o.answer
		require.NoError(t, a.Err, "sign-up %s", o.StaffID)
		switch a.Status {
		case http.StatusCreated:
			require.NotContains(t, created, o.base, "two members created for %s", o.base)
			require.Equal(t, o.StaffID, a.str("staff_id"))
			require.Equal(t, o.base, a.str("email"), "the email is stored normalised")
			created[o.base] = o.StaffID
		case http.StatusConflict:
			require.Equal(t, "already_taken", a.str("code"), "%v", a.Body)
			require.Equal(t, "email", a.str("field"), "%v", a.Body)
			conflicts++
		default:
			t.Fatalf("sign-up %s: status %d %v", o.StaffID, a.Status, a.Body)
		}
	}
	require.Len(t, created, emails)
	require.Equal(t, len(out)-emails, conflicts)

	rows, n := staffRows(t, pool)
	require.Equal(t, emails, n, "rows in staff")
	require.Equal(t, created, rows, "each row is the member a 201 answered")
}
