package storm

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// maxAnswer bounds the part of an answer that is read.
const maxAnswer = 1 << 20

// outcome is how one request ended.
type outcome uint8

const (
	notSent    outcome = iota // the storm was interrupted before it
	answered                  // an HTTP answer, of result.status
	timedOut                  // no answer within Config.Timeout
	failed                    // a transport error
	cancelled                 // interrupted while in flight
	droppedOut                // an open loop's, due while Config.MaxInFlight were in flight
)

// result is what one request got.
type result struct {
	outcome outcome
	status  int
	// latency is from the request's start, in an open loop from its
	// due time; lag is how late an open loop's request started.
	latency, lag time.Duration
	// reason is the rejection's "code field" for an answer other than
	// 201, or the error of a request that got none.
	reason string
}

// Run sends the storm cfg describes, a closed or an open loop (not a
// search: see RunSearch), checks the nodes afterwards, and
// returns what it saw; Report.Problems lists every broken guarantee. It
// asks every target's /healthz first, and returns ErrUnhealthy without
// sending anything (and no report) when one does not answer "ok". When ctx
// ends it stops, and returns the report of what it sent, unchecked, with
// ErrInterrupted.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.FindRate {
		return nil, errors.New("storm: FindRate is a search: run it with RunSearch")
	}
	c, nodes, err := begin(ctx, cfg)
	if err != nil {
		return nil, err
	}
	defer c.close()
	return c.storm(ctx, cfg, nodes, cfg.Seed, cfg.Rate)
}

// begin makes the client of a storm and asks every target's /healthz.
func begin(ctx context.Context, cfg Config) (*client, []*Node, error) {
	c := newClient(cfg)
	var nodes []*Node
	for _, t := range cfg.Targets {
		base, _ := parseTarget(t)
		nodes = append(nodes, &Node{URL: base})
	}
	if err := c.preflight(ctx, nodes); err != nil {
		c.close()
		if ctx.Err() != nil {
			return nil, nil, ErrInterrupted
		}
		return nil, nil, err
	}
	return c, nodes, nil
}

// storm sends one storm to nodes, a closed loop when rate is 0 and an
// open loop at rate otherwise, then checks it.
func (c *client) storm(ctx context.Context, cfg Config, nodes []*Node, seed int64, rate float64) (*Report, error) {
	stderr := cfg.Stderr
	if stderr == nil {
		stderr = io.Discard
	}
	r := &Report{Requests: cfg.Requests, Emails: cfg.Emails, Concurrency: cfg.Concurrency, Timeout: cfg.Timeout}
	if rate > 0 {
		r.Concurrency = 0
		r.Rate, r.Duration, r.Dup, r.MaxInFlight = rate, cfg.Duration, cfg.Dup, cfg.MaxInFlight
		r.Requests, r.Emails = openRequests(rate, cfg.Duration, cfg.Dup)
	}
	for _, n := range nodes {
		r.Nodes = append(r.Nodes, &Node{URL: n.URL, Name: n.Name, Backend: n.Backend})
	}

	p := newPlan(seed, r.Requests, r.Emails, len(r.Nodes))
	r.Seed = p.seed
	results := make([]result, len(p.sends))
	var done atomic.Int64
	stop := startProgress(cfg, stderr, len(p.sends), func() int { return int(done.Load()) })
	send := func(i int, lag time.Duration) {
		s := p.sends[i]
		res := c.post(ctx, r.Nodes[s.target].URL, s)
		res.latency += lag
		res.lag = lag
		if results[i] = res; res.outcome != cancelled {
			done.Add(1)
		}
	}
	start := time.Now()
	if rate > 0 {
		schedule(ctx, len(p.sends), rate, cfg.MaxInFlight, wallClock,
			func(i int, at time.Time) { send(i, time.Since(at)) },
			func(i int) { results[i].outcome = droppedOut })
	} else {
		forEach(ctx, len(p.sends), cfg.Concurrency, func(i int) { send(i, 0) })
	}
	r.Elapsed = time.Since(start)
	stop(ctx.Err() != nil)

	created := r.tally(p, results)
	if !cfg.FindRate {
		r.problem5xx()
	}
	if ctx.Err() != nil {
		return r, ErrInterrupted
	}
	if cfg.Progress.resolve(stderr) != ProgressOff {
		fmt.Fprintf(stderr, "storm: checking %s on %s\n", plural(len(p.emails), "email"), plural(len(r.Nodes), "node"))
	}
	c.check(ctx, r, p, created)
	if ctx.Err() != nil {
		r.Checked = false
		return r, ErrInterrupted
	}
	return r, nil
}

// forEach calls fn(i) for i from 0 to n-1, workers at a time, and returns
// when the calls it started are done. It starts none once ctx has ended.
func forEach(ctx context.Context, n, workers int, fn func(i int)) {
	var next atomic.Int64
	var wg sync.WaitGroup
	for range min(n, workers) {
		wg.Go(func() {
			for ctx.Err() == nil {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				fn(i)
			}
		})
	}
	wg.Wait()
}

// client sends the storm's requests, to its targets only.
type client struct {
	http      *http.Client
	transport *http.Transport
	timeout   time.Duration
}

func newClient(cfg Config) *client {
	conns := cfg.Concurrency
	if cfg.open() {
		conns = cfg.MaxInFlight
	}
	tr := &http.Transport{
		// Never through a proxy from the environment: the traffic goes to
		// the targets and nowhere else.
		Proxy:               nil,
		DialContext:         (&net.Dialer{Timeout: cfg.Timeout, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns:        conns * len(cfg.Targets),
		MaxIdleConnsPerHost: conns,
		IdleConnTimeout:     30 * time.Second,
	}
	return &client{
		transport: tr,
		timeout:   cfg.Timeout,
		http: &http.Client{
			Transport: tr,
			// A redirect could lead away from the targets: take it as the
			// answer.
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		},
	}
}

func (c *client) close() { c.transport.CloseIdleConnections() }

// post sends one sign-up.
func (c *client) post(ctx context.Context, base string, s send) result {
	body, err := json.Marshal(map[string]string{"staff_id": s.staffID, "email": s.spelling, "name": s.name})
	if err != nil {
		return result{outcome: failed, reason: err.Error()}
	}
	rctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(rctx, http.MethodPost, base+"/staff", bytes.NewReader(body))
	if err != nil {
		return result{outcome: failed, reason: err.Error()}
	}
	req.Header.Set("Content-Type", "application/json")
	start := time.Now()
	status, answer, err := c.do(req)
	res := result{outcome: answered, status: status, latency: time.Since(start)}
	switch {
	case err != nil && ctx.Err() != nil:
		return result{outcome: cancelled}
	case err != nil && errors.Is(err, context.DeadlineExceeded):
		return result{outcome: timedOut, latency: res.latency, reason: fmt.Sprintf("no answer within %v", c.timeout)}
	case err != nil:
		return result{outcome: failed, latency: res.latency, reason: err.Error()}
	case status != http.StatusCreated:
		var rej struct{ Code, Field string }
		if json.Unmarshal(answer, &rej) == nil && rej.Code != "" {
			res.reason = rej.Code
			if rej.Field != "" {
				res.reason += " " + rej.Field
			}
		}
	}
	return res
}

// do sends req and reads its answer, up to maxAnswer bytes.
func (c *client) do(req *http.Request) (int, []byte, error) {
	resp, err := c.http.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswer))
	if err != nil {
		return resp.StatusCode, nil, err
	}
	return resp.StatusCode, body, nil
}

// getJSON asks base+path and decodes an answer of 200 into v.
func (c *client) getJSON(ctx context.Context, url string, v any) error {
	rctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(rctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	status, body, err := c.do(req)
	if err != nil {
		return err
	}
	if status != http.StatusOK {
		return fmt.Errorf("answered %d %s: %s", status, http.StatusText(status), bytes.TrimSpace(body[:min(len(body), 200)]))
	}
	if err := json.Unmarshal(body, v); err != nil {
		return fmt.Errorf("answered 200 with a body that is not the JSON expected: %w", err)
	}
	return nil
}
