package storm

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"time"
)

// maxProblemsShown bounds the problems Write prints.
const maxProblemsShown = 20

// Report is what a storm sent, what came back, and what the check found.
type Report struct {
	// Requests, Emails, Concurrency and Timeout are the storm's Config;
	// Seed the seed it used.
	Requests, Emails, Concurrency int
	Timeout                       time.Duration
	Seed                          int64
	// Rate is an open loop's requests a second, 0 in a closed loop; then
	// Duration, Dup and MaxInFlight are the Config's, and Requests and
	// Emails follow from them.
	Rate        float64
	Duration    time.Duration
	Dup         float64
	MaxInFlight int
	// Nodes are the targets, in the order given.
	Nodes []*Node

	// Status counts the answers by HTTP status; Reasons counts them, by
	// status, by the rejection they carry ("already_taken email").
	Status  map[int]int
	Reasons map[int]map[string]int
	// Timeouts and Errors count the requests that got no answer, within
	// Config.Timeout or at all.
	Timeouts, Errors int
	// Cancelled and NotSent count the requests an interruption cut short
	// and those it kept from being sent.
	Cancelled, NotSent int
	// Dropped counts an open loop's requests not sent because
	// MaxInFlight were in flight when they were due.
	Dropped int
	// Elapsed is how long the requests took, from the first sent to the
	// last answered.
	Elapsed time.Duration
	// Latency is over the answered requests, from their start, in an
	// open loop from their due time. Lag is how late an open loop's
	// requests started, over those sent: the load tool behind.
	Latency, Lag Latency

	// Checked says that the check ran to its end.
	Checked bool
	// Problems are the broken guarantees, each naming the email or the
	// node.
	Problems []string
}

// Node is one target.
type Node struct {
	// URL is the target's base URL; Name and Backend are what its
	// /healthz says.
	URL, Name, Backend string
	// Sent counts the requests sent to it, Created its 201s.
	Sent, Created int
	// Status and Reasons count its answers as Report's do.
	Status  map[int]int
	Reasons map[int]map[string]int
	// Timeouts and Errors count its requests that got no answer;
	// FirstError is the first such error.
	Timeouts, Errors int
	FirstError       string
	// BackstopViolations is what its /healthz said after the storm.
	BackstopViolations int64
}

// String names the node: "node a (http://127.0.0.1:8080)".
func (n *Node) String() string {
	if n.Name == "" {
		return n.URL
	}
	return fmt.Sprintf("node %s (%s)", n.Name, n.URL)
}

// OK says that the storm ran to its end and broke no guarantee.
func (r *Report) OK() bool { return r.Checked && len(r.Problems) == 0 }

// Created is the number of 201s.
func (r *Report) Created() int { return r.Status[201] }

// Sent is the number of requests sent.
func (r *Report) Sent() int { return r.Requests - r.NotSent - r.Dropped }

func (r *Report) problem(format string, args ...any) {
	r.Problems = append(r.Problems, fmt.Sprintf(format, args...))
}

// tally counts the results, notes the addresses created twice and the
// 5xx, and returns the 201s by address.
func (r *Report) tally(p *plan, results []result) map[int][]creation {
	r.Status, r.Reasons = map[int]int{}, map[int]map[string]int{}
	for _, n := range r.Nodes {
		n.Status, n.Reasons = map[int]int{}, map[int]map[string]int{}
	}
	created := map[int][]creation{}
	var latencies, lags []time.Duration
	for i, res := range results {
		s := p.sends[i]
		n := r.Nodes[s.target]
		if res.outcome != notSent && res.outcome != droppedOut {
			n.Sent++
			lags = append(lags, res.lag)
		}
		switch res.outcome {
		case notSent:
			r.NotSent++
		case droppedOut:
			r.Dropped++
		case cancelled:
			r.Cancelled++
		case timedOut, failed:
			if res.outcome == timedOut {
				r.Timeouts++
				n.Timeouts++
			} else {
				r.Errors++
				n.Errors++
			}
			if n.FirstError == "" {
				n.FirstError = res.reason
			}
		case answered:
			latencies = append(latencies, res.latency)
			count(r.Status, r.Reasons, res)
			count(n.Status, n.Reasons, res)
			if res.status == 201 {
				n.Created++
				created[s.email] = append(created[s.email], creation{staffID: s.staffID, node: s.target})
			}
		}
	}
	r.Latency = latencyOf(latencies)
	if r.Rate > 0 {
		r.Lag = latencyOf(lags)
	}

	for _, e := range slices.Sorted(maps.Keys(created)) {
		if cs := created[e]; len(cs) > 1 {
			var by []string
			for _, c := range cs {
				by = append(by, fmt.Sprintf("%s from %s", c.staffID, r.Nodes[c.node]))
			}
			r.problem("email %s got %d × 201: %s", p.emails[e], len(cs), strings.Join(by, ", "))
		}
	}
	return created
}

// problem5xx adds a problem for each node that answered a 5xx.
func (r *Report) problem5xx() {
	for _, n := range r.Nodes {
		if k := countWhere(n.Status, is5xx); k > 0 {
			r.problem("%s answered %d POST /staff with a 5xx: %s", n, k, breakdown(n.Status, n.Reasons, is5xx))
		}
	}
}

func count(status map[int]int, reasons map[int]map[string]int, res result) {
	status[res.status]++
	if res.reason != "" {
		if reasons[res.status] == nil {
			reasons[res.status] = map[string]int{}
		}
		reasons[res.status][res.reason]++
	}
}

// countWhere counts the answers whose status keep takes.
func countWhere(status map[int]int, keep func(status int) bool) int {
	k := 0
	for s, c := range status {
		if keep(s) {
			k += c
		}
	}
	return k
}

// breakdown prints the answers whose status keep takes, by status and
// reason: "500 ×2 (internal 2), 503 ×1 (unavailable 1)".
func breakdown(status map[int]int, byReason map[int]map[string]int, keep func(status int) bool) string {
	var parts []string
	for _, s := range slices.Sorted(maps.Keys(status)) {
		if !keep(s) {
			continue
		}
		part := fmt.Sprintf("%d ×%d", s, status[s])
		if why := reasons(byReason[s]); why != "" {
			part += " (" + why + ")"
		}
		parts = append(parts, part)
	}
	return strings.Join(parts, ", ")
}

// reasons prints the counts of rejections: "already_taken email 12, invalid email 1".
func reasons(counts map[string]int) string {
	var why []string
	for _, reason := range slices.Sorted(maps.Keys(counts)) {
		why = append(why, fmt.Sprintf("%s %d", reason, counts[reason]))
	}
	return strings.Join(why, ", ")
}

// Problems prints "1 problem" or "n problems".
func Problems(n int) string { return plural(n, "problem") }

// plural prints "1 node" or "n nodes".
func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

// Write prints the summary: the counts by status, the rate, the
// latencies, each node, then the check and its problems.
func (r *Report) Write(w io.Writer) {
	if r.Rate > 0 {
		fmt.Fprintf(w, "storm: open loop, %s for %v: %d POST /staff started on schedule to %s, %s (%.0f%% duplicates), at most %d in flight, timeout %v, seed %d\n",
			perSecond(r.Rate), r.Duration, r.Requests, plural(len(r.Nodes), "node"), plural(r.Emails, "email"), r.Dup*100, r.MaxInFlight, r.Timeout, r.Seed)
	} else {
		fmt.Fprintf(w, "storm: closed loop, %d POST /staff to %s, %s, concurrency %d, timeout %v, seed %d\n",
			r.Requests, plural(len(r.Nodes), "node"), plural(r.Emails, "email"), r.Concurrency, r.Timeout, r.Seed)
	}
	line := func(label string, n int, detail string) {
		if detail != "" {
			detail = "  " + detail
		}
		fmt.Fprintf(w, "  %-18s %7d%s\n", label, n, detail)
	}
	is4xx := func(s int) bool { return s >= 400 && s <= 499 && s != 409 }
	line("201 created", r.Status[201], "")
	line("409 conflict", r.Status[409], reasons(r.Reasons[409]))
	line("4xx other", countWhere(r.Status, is4xx), breakdown(r.Status, r.Reasons, is4xx))
	line("5xx", countWhere(r.Status, is5xx), breakdown(r.Status, r.Reasons, is5xx))
	isOther := func(s int) bool { return (s < 400 || s > 599) && s != 201 }
	if k := countWhere(r.Status, isOther); k > 0 {
		line("other answers", k, breakdown(r.Status, r.Reasons, isOther))
	}
	transport := ""
	if r.Timeouts > 0 {
		transport = plural(r.Timeouts, "timeout")
	}
	line("transport errors", r.Timeouts+r.Errors, transport)
	if r.Cancelled+r.NotSent > 0 {
		line("cancelled", r.Cancelled, "in flight when interrupted")
		line("not sent", r.NotSent, "")
	}
	if r.Rate > 0 {
		line("dropped", r.Dropped, fmt.Sprintf("due while %d were in flight, not sent", r.MaxInFlight))
	}
	rate := 0.0
	if r.Elapsed > 0 {
		rate = float64(r.Sent()-r.Cancelled) / r.Elapsed.Seconds()
	}
	if r.Rate > 0 {
		fmt.Fprintf(w, "  took %v, %.0f req/s offered, %.0f%% answered (not 5xx)\n", r.Elapsed.Round(time.Millisecond), r.Rate, 100*float64(r.Answered())/float64(r.Requests))
		fmt.Fprintf(w, "  latency p50 %s  p90 %s  p99 %s  max %s  (from each request's due time)\n", ms(r.Latency.P50), ms(r.Latency.P90), ms(r.Latency.P99), ms(r.Latency.Max))
		fmt.Fprintf(w, "  start lag p99 %s  max %s  (how late requests started: the load tool behind)\n", ms(r.Lag.P99), ms(r.Lag.Max))
	} else {
		fmt.Fprintf(w, "  took %v, %.0f req/s (closed loop: the rate the answers let through, not an open-loop capacity)\n", r.Elapsed.Round(time.Millisecond), rate)
		fmt.Fprintf(w, "  latency p50 %s  p90 %s  p99 %s  max %s\n", ms(r.Latency.P50), ms(r.Latency.P90), ms(r.Latency.P99), ms(r.Latency.Max))
	}
	for _, n := range r.Nodes {
		fmt.Fprintf(w, "  %s: %d sent, %d created", n, n.Sent, n.Created)
		if k := n.Timeouts + n.Errors; k > 0 {
			fmt.Fprintf(w, ", %d transport errors (first: %s)", k, n.FirstError)
		}
		fmt.Fprintln(w)
	}
	r.writeCheck(w)
}

// writeCheck prints the check and its problems.
func (r *Report) writeCheck(w io.Writer) {
	switch {
	case !r.Checked:
		fmt.Fprintf(w, "check: not run (interrupted)")
		if len(r.Problems) > 0 {
			fmt.Fprintf(w, "; %s already", Problems(len(r.Problems)))
		}
		fmt.Fprintln(w)
	case len(r.Problems) == 0:
		fmt.Fprintf(w, "check: OK: %s on %s: every email with a 201 is listed once on each node, none twice; backstop_violations 0 on every node; no 5xx\n",
			plural(r.Emails, "email"), plural(len(r.Nodes), "node"))
	default:
		fmt.Fprintf(w, "check: FAILED: %s\n", Problems(len(r.Problems)))
	}
	for i, p := range r.Problems {
		if i == maxProblemsShown {
			fmt.Fprintf(w, "  ... and %d more\n", len(r.Problems)-i)
			break
		}
		fmt.Fprintf(w, "  %s\n", p)
	}
}

func is5xx(status int) bool { return status >= 500 && status <= 599 }
