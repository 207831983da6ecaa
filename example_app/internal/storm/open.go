package storm

import (
	"context"
	"fmt"
	"io"
	"math"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"
)

// due is when the i-th request of an open loop at rate a second is due,
// after the loop's start: i/rate seconds.
func due(i int, rate float64) time.Duration {
	return time.Duration(float64(i) * float64(time.Second) / rate)
}

// clock is the time an open loop keeps; the tests give a fake one.
type clock struct {
	now func() time.Time
	// sleep waits d, and says false when ctx ended first.
	sleep func(ctx context.Context, d time.Duration) bool
}

var wallClock = clock{now: time.Now, sleep: func(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}}

// schedule is an open loop: it calls fn(i, at) for i from 0 to n-1, each
// in a goroutine of its own, at its due time at (the start plus due(i,
// rate)), whatever the calls before it are doing; when it is late it
// starts the calls due at once. A call due while maxInFlight calls run is
// not made: schedule calls drop(i) instead, in its own goroutine. It
// starts none once ctx has ended, and returns when the calls it made are
// done, with how many were due before ctx ended.
func schedule(ctx context.Context, n int, rate float64, maxInFlight int, clk clock, fn func(i int, at time.Time), drop func(i int)) (reached int) {
	var inFlight atomic.Int64
	var wg sync.WaitGroup
	defer wg.Wait()
	start := clk.now()
	for i := range n {
		at := start.Add(due(i, rate))
		if !clk.sleep(ctx, at.Sub(clk.now())) {
			return i
		}
		if inFlight.Load() >= int64(maxInFlight) {
			drop(i)
			continue
		}
		inFlight.Add(1)
		wg.Go(func() {
			defer inFlight.Add(-1)
			fn(i, at)
		})
	}
	return n
}

// openRequests is how many requests an open loop at rate for d sends,
// and over how many addresses, so that a share dup of them repeats an
// address sent before.
func openRequests(rate float64, d time.Duration, dup float64) (requests, emails int) {
	requests = max(1, int(math.Round(rate*d.Seconds())))
	return requests, max(1, int(math.Round(float64(requests)*(1-dup))))
}

// Answered counts the answers that are not 5xx: a 201, a 409, another
// 4xx.
func (r *Report) Answered() int { return countWhere(r.Status, func(s int) bool { return !is5xx(s) }) }

// within says that the step met the bounds of a search: p99 at most
// bound, and at least 99% of its requests answered (Answered).
func (r *Report) within(bound time.Duration) bool {
	return r.Latency.P99 <= bound && r.Answered()*100 >= r.Requests*99
}

// Search is a search for the highest rate an open loop sustains.
type Search struct {
	// P99 and RateStep are the Config's; Dup, MaxInFlight and Timeout
	// too.
	P99         time.Duration
	RateStep    float64
	Dup         float64
	MaxInFlight int
	Timeout     time.Duration
	Duration    time.Duration
	// Steps are the open loops in order: one a rate, two for a rate whose
	// first was beyond the bounds.
	Steps []*Report
	// Sustained is the rate of the last step within the bounds, 0 when
	// the first was not.
	Sustained float64
}

// OK says that every step ran to its end and broke no guarantee.
func (s *Search) OK() bool {
	for _, r := range s.Steps {
		if !r.OK() {
			return false
		}
	}
	return len(s.Steps) > 0
}

// RunSearch runs the search cfg describes (cfg.FindRate): open loops of
// cfg.Duration from cfg.Rate up, each RateStep times the one before,
// until a step's p99 is above cfg.P99 or fewer than 99% of its requests
// are answered (a 5xx is no answer here, and no broken guarantee), twice
// in a row at the same rate. Each
// step is checked as Run checks a storm; the search stops at a step that
// broke a guarantee. Its errors are Run's.
func RunSearch(ctx context.Context, cfg Config) (*Search, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if !cfg.FindRate {
		return nil, fmt.Errorf("storm: RunSearch needs FindRate")
	}
	c, nodes, err := begin(ctx, cfg)
	if err != nil {
		return nil, err
	}
	defer c.close()
	s := &Search{P99: cfg.P99, RateStep: cfg.RateStep, Dup: cfg.Dup, MaxInFlight: cfg.MaxInFlight, Timeout: cfg.Timeout, Duration: cfg.Duration}
	seed := cfg.Seed
	for seed == 0 {
		seed = newPlan(0, 1, 1, 1).seed
	}
	k := int64(0)
	step := func(rate float64) (*Report, error) {
		r, err := c.storm(ctx, cfg, nodes, seed+k, rate)
		k++
		s.Steps = append(s.Steps, r)
		return r, err
	}
	for rate := cfg.Rate; rate <= MaxRate; rate = math.Round(rate * cfg.RateStep) {
		r, err := step(rate)
		if err == nil && r.OK() && !r.within(cfg.P99) {
			// Once more: on a shared machine one step can hit a burst of
			// someone else's load.
			r, err = step(rate)
		}
		if err != nil || !r.OK() || !r.within(cfg.P99) {
			return s, err
		}
		s.Sustained = rate
	}
	return s, nil
}

// Write prints a line a step, the rate found, and the problems.
func (s *Search) Write(w io.Writer) {
	if len(s.Steps) == 0 {
		return
	}
	fmt.Fprintf(w, "storm: open loop, search: steps of %v from %s, each %g times the one before, until p99 > %v or fewer than 99%% answered (not 5xx) twice at a rate; %.0f%% duplicate emails, at most %d in flight, timeout %v\n",
		s.Duration, perSecond(s.Steps[0].Rate), s.RateStep, s.P99, s.Dup*100, s.MaxInFlight, s.Timeout)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "  rate\tsent\t201\t409\t4xx\t5xx\terrors\tdropped\tp50\tp90\tp99\tmax\tanswered\t")
	for _, r := range s.Steps {
		verdict := "within"
		if !r.within(s.P99) {
			verdict = "beyond"
		}
		is4xx := func(s int) bool { return s >= 400 && s <= 499 && s != 409 }
		fmt.Fprintf(tw, "  %.0f\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%s\t%s\t%s\t%s\t%.1f%%\t  %s\n",
			r.Rate, r.Sent(), r.Status[201], r.Status[409], countWhere(r.Status, is4xx), countWhere(r.Status, is5xx), r.Timeouts+r.Errors, r.Dropped,
			ms(r.Latency.P50), ms(r.Latency.P90), ms(r.Latency.P99), ms(r.Latency.Max), 100*float64(r.Answered())/float64(r.Requests), verdict)
	}
	_ = tw.Flush()
	fmt.Fprintln(w, "  (rate: requests a second, started on schedule; latency from each request's due time, over the answered ones)")
	switch last := s.Steps[len(s.Steps)-1]; {
	case !last.OK():
	case s.Sustained == 0:
		fmt.Fprintf(w, "sustained: none: the first rate, %s, was beyond p99 %v or 99%% answered\n", perSecond(last.Rate), s.P99)
	case last.Rate == s.Sustained:
		fmt.Fprintf(w, "sustained: at least %s, the highest rate storm steps to (%d)\n", perSecond(s.Sustained), MaxRate)
	default:
		fmt.Fprintf(w, "sustained: %s (p99 ≤ %v, ≥ 99%% answered); the next rate, %s, was not, twice\n", perSecond(s.Sustained), s.P99, perSecond(last.Rate))
	}
	for _, r := range s.Steps {
		if len(r.Problems) > 0 || !r.Checked {
			fmt.Fprintf(w, "step %s: ", perSecond(r.Rate))
			r.writeCheck(w)
			return
		}
	}
	fmt.Fprintf(w, "check: OK: every step: every email with a 201 is listed once on each node, none twice; backstop_violations 0 on every node\n")
}

// perSecond prints a rate: "1000 req/s".
func perSecond(rate float64) string { return fmt.Sprintf("%.0f req/s", rate) }
