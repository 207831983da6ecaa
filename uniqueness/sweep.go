package uniqueness

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/claimbus/claimbus/claimstore"
	"github.com/claimbus/claimbus/lockstore"
)

// sweepNamespace is the lock namespace of the sweeper: Sweep holds the key
// {sweepNamespace, scope} on Config.Locker while it sweeps a scope, so that
// one node at a time sweeps it.
const sweepNamespace = "uniqueness.sweep"

// sweepPage is how many reservations Sweep reads at a time.
const sweepPage = 100

// sweepClaimWait bounds the wait of Sweep for the claim of a value whose
// reservation it would expire; a value being claimed now is left to its
// claimant.
const sweepClaimWait = 10 * time.Millisecond

// SweepResult counts what one Sweep did.
type SweepResult struct {
	// Dropped counts the reservations whose values the lookup now shows:
	// taken for good, so the reservation is no longer needed.
	Dropped int
	// Expired counts the pending reservations in doubt for longer than
	// maxLag whose values the lookup does not show: deleted, so the values
	// are free.
	Expired int
	// Kept counts the reservations still needed: values in flight or not
	// yet shown by the read model.
	Kept int
	// Skipped names the scopes another sweeper was sweeping.
	Skipped []string
}

// Sweep goes once through the reservations of every scope whose rules
// reserve, dropping those the lookup now shows and those pending past
// maxLag (see SweepResult), so that the store keeps only values in flight
// or not yet shown. It holds {"uniqueness.sweep", scope} on Config.Locker while
// it sweeps a scope and skips a scope whose key another holds, so with the
// PostgreSQL store one node at a time sweeps it, cluster-wide; a sweep
// whose lock is lost stops. A pending reservation is expired only under
// its value's claim, so it never races a claimant.
//
// Run it periodically (RunSweeper does): claims drop the reservations
// they find shown too, but values nobody claims again would stay.
func (m *Middleware) Sweep(ctx context.Context) (SweepResult, error) {
	m.swept.Store(true)
	var res SweepResult
	var errs []error
	for _, r := range m.sweepers() {
		lk, err := m.claimer.locker.TryLock(ctx, lockstore.Key{Namespace: sweepNamespace, ID: r.scope})
		if errors.Is(err, lockstore.ErrLocked) {
			res.Skipped = append(res.Skipped, r.scope)
			continue
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("uniqueness: sweep %s: %w", r.scope, err))
			continue
		}
		err = m.sweepScope(ctx, r, lk, &res)
		if rerr := lk.Release(context.WithoutCancel(ctx)); rerr != nil && err == nil && !errors.Is(rerr, lockstore.ErrLockLost) {
			err = rerr
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("uniqueness: sweep %s: %w", r.scope, err))
		}
	}
	return res, errors.Join(errs...)
}

// errSweepLost stops a sweep whose lock was lost.
var errSweepLost = errors.New("the sweeper's lock was lost")

// sweepScope sweeps the reservations of r's scope while lk is held.
func (m *Middleware) sweepScope(ctx context.Context, r *Rule, lk lockstore.Lock, res *SweepResult) error {
	after := ""
	for {
		page, err := r.reserve.List(ctx, r.scope, after, sweepPage)
		if err != nil {
			return err
		}
		for _, rv := range page {
			if isClosed(lk.Lost()) {
				return errSweepLost
			}
			if err := m.sweepOne(ctx, r, rv, res); err != nil {
				return err
			}
		}
		if len(page) < sweepPage {
			return nil
		}
		after = page[len(page)-1].Key.ID
	}
}

// sweepOne drops rv when the lookup shows its value, and expires it when it
// is pending past maxLag.
func (m *Middleware) sweepOne(ctx context.Context, r *Rule, rv claimstore.Reservation, res *SweepResult) error {
	found, err := r.taken(ctx, rv.Key.ID)
	shown := found.Taken
	if err != nil {
		return fmt.Errorf("lookup of %s: %w", rv.Key, err)
	}
	switch {
	case shown:
		if err := r.reserve.Drop(ctx, rv.Key); err != nil {
			return err
		}
		res.Dropped++
		return nil
	case rv.Confirmed || rv.Age < r.maxLag:
		res.Kept++
		return nil
	}
	// In doubt past maxLag and not shown: free, once no claimant holds it.
	cl, err := m.claimer.claim(ctx, rv.Key, lookupFunc(neverTaken), sweepClaimWait, nil)
	if err != nil {
		if !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, lockstore.ErrTimeout) && ctx.Err() == nil {
			m.logger.LogAttrs(ctx, slog.LevelWarn, "reservation sweep cannot claim a value to expire it",
				slog.String("key", rv.Key.String()), slog.Any("error", err))
		}
		res.Kept++
		return nil // a value claimed now is its claimant's to settle
	}
	// The age listed may be stale (a redelivery of the owner restarted it
	// since): under the claim, the store decides again, by its clock, with
	// the same rule as a claimant's Reserve. Handed over to the sweeper, the
	// reservation is deleted; held, it is kept.
	_, expired, err := r.reserve.Reserve(ctx, rv.Key, sweeperOwner, r.maxLag)
	if err == nil && expired {
		err = r.reserve.Cancel(ctx, rv.Key, sweeperOwner)
	}
	err = errors.Join(err, cl.Release(context.WithoutCancel(ctx)))
	if err != nil {
		return err
	}
	if expired {
		res.Expired++
	} else {
		res.Kept++
	}
	return nil
}

// sweeperOwner owns, for a moment, the reservations the sweeper expires.
const sweeperOwner = "uniqueness.sweeper"

// sweepers returns the first reserving rule of each scope.
func (m *Middleware) sweepers() []*Rule {
	var out []*Rule
	seen := map[string]bool{}
	for i := range m.rules {
		r := &m.rules[i]
		if r.reserve != nil && !seen[r.scope] {
			seen[r.scope] = true
			out = append(out, r)
		}
	}
	return out
}

// RunSweeper sweeps (Sweep) at once and then every interval until ctx
// ends, logging what each sweep did at Debug and its errors at Warn; it
// returns nil when ctx ends. The caller owns the goroutine it runs on.
func (m *Middleware) RunSweeper(ctx context.Context, interval time.Duration) error {
	if interval <= 0 {
		return fmt.Errorf("uniqueness: RunSweeper with an interval of %v: it must be positive", interval)
	}
	m.swept.Store(true)
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		res, err := m.Sweep(ctx)
		switch {
		case ctx.Err() != nil:
			return nil
		case err != nil:
			m.logger.LogAttrs(ctx, slog.LevelWarn, "reservation sweep failed", slog.Any("error", err))
		default:
			m.logger.LogAttrs(ctx, slog.LevelDebug, "reservations swept",
				slog.Int("dropped", res.Dropped), slog.Int("expired", res.Expired), slog.Int("kept", res.Kept))
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// isClosed reports whether ch is closed (or has a value ready).
func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}
