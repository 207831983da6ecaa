package storm

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strings"

	"github.com/claimbus/claimbus/uniqueness"
)

// health is the body of GET /healthz.
type health struct {
	Status  string `json:"status"`
	Node    string `json:"node"`
	Backend string `json:"backend"`
	// BackstopViolations counts the times a unique index refused a row
	// that the claims should have kept out. Absent on a node that does
	// not report it.
	BackstopViolations *int64 `json:"backstop_violations"`
}

// staff is an item of GET /staff?email=X.
type staff struct {
	StaffID string `json:"staff_id"`
	Email   string `json:"email"`
	Name    string `json:"name"`
}

// creation is a 201: the staff id it created, and the node that said so.
type creation struct {
	staffID string
	node    int
}

// health asks a node's /healthz, and fails unless it says "ok".
func (c *client) health(ctx context.Context, base string) (health, error) {
	var h health
	if err := c.getJSON(ctx, base+"/healthz", &h); err != nil {
		return h, fmt.Errorf("GET /healthz %w", err)
	}
	if h.Status != "ok" {
		return h, fmt.Errorf("GET /healthz: status %q, want \"ok\"", h.Status)
	}
	return h, nil
}

// preflight asks every node's /healthz, and learns their names.
func (c *client) preflight(ctx context.Context, nodes []*Node) error {
	errs := make([]error, len(nodes))
	forEach(ctx, len(nodes), len(nodes), func(i int) {
		h, err := c.health(ctx, nodes[i].URL)
		if err != nil {
			errs[i] = fmt.Errorf("%s: %w", nodes[i], err)
			return
		}
		nodes[i].Name, nodes[i].Backend = h.Node, h.Backend
	})
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("%w, so nothing was sent:\n%w", ErrUnhealthy, err)
	}
	return nil
}

// check asks every node for the staff of every address, and for its
// backstop_violations, and adds what is wrong to r.Problems.
func (c *client) check(ctx context.Context, r *Report, p *plan, created map[int][]creation) {
	nn := len(r.Nodes)
	lists := make([][]staff, len(p.emails)*nn)
	errs := make([]error, len(lists))
	forEach(ctx, len(lists), cmp.Or(r.Concurrency, DefaultConcurrency), func(k int) {
		email, node := p.emails[k/nn], r.Nodes[k%nn]
		errs[k] = c.getJSON(ctx, node.URL+"/staff?email="+url.QueryEscape(email), &lists[k])
	})
	healths := make([]health, nn)
	healthErrs := make([]error, nn)
	forEach(ctx, nn, nn, func(i int) { healths[i], healthErrs[i] = c.health(ctx, r.Nodes[i].URL) })
	if ctx.Err() != nil {
		return
	}
	r.Checked = true

	failures := make([]int, nn)
	firstErr := make([]error, nn)
	for k, rows := range lists {
		e, ni := k/nn, k%nn
		email, node := p.emails[e], r.Nodes[ni]
		if errs[k] != nil {
			if failures[ni]++; firstErr[ni] == nil {
				firstErr[ni] = fmt.Errorf("GET /staff?email=%s %w", email, errs[k])
			}
			continue
		}
		for _, s := range rows {
			if got := uniqueness.NormalizeEmail(s.Email); got != email {
				r.problem("%s lists staff %s with email %q when asked for %s", node, s.StaffID, s.Email, email)
			}
		}
		ids := make([]string, len(rows))
		for i, s := range rows {
			ids[i] = s.StaffID
		}
		cs := created[e]
		switch {
		case len(rows) > 1:
			r.problem("%s lists %d staff for %s: %s", node, len(rows), email, strings.Join(ids, ", "))
		case len(cs) > 0 && len(rows) == 0:
			r.problem("%s lists no staff for %s, yet %s answered 201 for %s", node, email, r.Nodes[cs[0].node], cs[0].staffID)
		case len(cs) > 0 && !slices.ContainsFunc(cs, func(c creation) bool { return c.staffID == ids[0] }):
			r.problem("%s lists staff %s for %s, yet %s answered 201 for %s", node, ids[0], email, r.Nodes[cs[0].node], cs[0].staffID)
		}
	}
	for i, node := range r.Nodes {
		if failures[i] > 0 {
			r.problem("%s: the check could not read %d of %d emails (first: %v)", node, failures[i], len(p.emails), firstErr[i])
		}
		switch h := healths[i]; {
		case healthErrs[i] != nil:
			r.problem("%s: %v", node, healthErrs[i])
		case h.BackstopViolations == nil:
			r.problem("%s: GET /healthz does not report backstop_violations", node)
		default:
			node.BackstopViolations = *h.BackstopViolations
			if *h.BackstopViolations != 0 {
				r.problem("%s: backstop_violations %d: a unique index refused a row the claims should have kept out", node, *h.BackstopViolations)
			}
		}
	}
}
