package txcommand

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/claimbus/claimbus/uniqueness"
)

// sweepPage is how many reservations Sweep reads at a time.
const sweepPage = 200

// Sweep goes once through the reservations of every rule that reserves
// and drops those whose value the rule's lookup now shows: the read model
// has caught up, so the reservation is no longer needed. The others are
// kept (SweepResult.Kept): values the read model does not show yet. A
// reservation exists only for a committed command, so nothing is ever
// expired. Sweeps on several nodes at once are safe: a value the lookup
// shows stays taken whoever drops its reservation.
func (m *Middleware) Sweep(ctx context.Context) (uniqueness.SweepResult, error) {
	var res uniqueness.SweepResult
	var errs []error
	seen := map[string]bool{}
	for i := range m.rules {
		r := &m.rules[i]
		if !r.reserve || seen[r.names.Scope] {
			continue
		}
		seen[r.names.Scope] = true
		if err := m.sweepScope(ctx, r, &res); err != nil {
			errs = append(errs, fmt.Errorf("txcommand: sweep %s: %w", r.names.Scope, err))
		}
	}
	return res, errors.Join(errs...)
}

// sweepScope sweeps the reservations of r's scope.
func (m *Middleware) sweepScope(ctx context.Context, r *Rule, res *uniqueness.SweepResult) error {
	claims := m.backend.reservations()
	after := ""
	for {
		page, err := claims.List(ctx, r.names.Scope, after, sweepPage)
		if err != nil {
			return err
		}
		for _, rv := range page {
			shown, err := m.backend.shown(ctx, r.lookup, rv.Key.ID)
			if err != nil {
				return fmt.Errorf("lookup of %s: %w", rv.Key, err)
			}
			if !shown {
				res.Kept++
				continue
			}
			if err := claims.Drop(ctx, rv.Key); err != nil {
				return err
			}
			res.Dropped++
		}
		if len(page) < sweepPage {
			return nil
		}
		after = page[len(page)-1].Key.ID
	}
}

// RunSweeper sweeps every interval (see Sweep) until ctx ends, logging a
// failed sweep, and returns nil then; a non-positive interval is an error.
func (m *Middleware) RunSweeper(ctx context.Context, interval time.Duration) error {
	if interval <= 0 {
		return fmt.Errorf("txcommand: RunSweeper: interval is %v, want > 0", interval)
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		if _, err := m.Sweep(ctx); err != nil && ctx.Err() == nil {
			m.logger.WarnContext(ctx, "txcommand: sweep failed, trying again at the next interval", "error", err)
		}
	}
}
