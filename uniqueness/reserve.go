package uniqueness

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"sync"
	"time"

	"github.com/claimbus/claimbus/claimstore"
	"github.com/claimbus/claimbus/internal/observe"
	"github.com/claimbus/claimbus/lockstore"
	"github.com/claimbus/claimbus/middleware"
)

// Reserve makes a rule keep a durable reservation of each value it claims,
// in store, so that the value stays taken while the read model the lookup
// reads does not show it yet (a projection fed by events, a replica): see
// the reservations section of uniqueness/README.md.
//
// maxLag is how long a pending reservation whose owner is gone (a node that
// crashed, a claim whose lock was lost, between the handler's commit and
// the confirmation, which lands after the command's answer) keeps its
// value taken while the lookup does not show it; after that the value is free again. Set it above the longest run of
// the rule's handlers plus the longest lag of the read model: a write that
// commits and is still not shown after maxLag can be duplicated. Required:
// Validate refuses a maxLag that is not positive.
//
// Rules that share a scope must all reserve, in the same store, with the
// same maxLag, or none of them. Run the sweeper (Middleware.RunSweeper)
// from before the first command: a middleware whose rules reserve logs a
// Warn at its first command when no sweep has started.
func Reserve(store claimstore.Reservations, maxLag time.Duration) Option {
	return Option{reserve: &reserveOption{store: store, maxLag: maxLag}}
}

// reserveOption is what Reserve gives a rule.
type reserveOption struct {
	store  claimstore.Reservations
	maxLag time.Duration
}

// apply sets the reservation of r, and reports what is wrong with it.
func (o *reserveOption) apply(r *Rule) []error {
	var errs []error
	if o.store == nil {
		errs = append(errs, errors.New("Reserve with a nil store"))
	}
	if o.maxLag <= 0 {
		errs = append(errs, fmt.Errorf("Reserve with a maxLag of %v: it must be positive (above a handler's run plus the read model's lag)", o.maxLag))
	}
	r.reserve, r.maxLag = o.store, o.maxLag
	return errs
}

// phase is where a command's claims are: being taken, or released after
// the handler succeeded or failed. It decides what a group's lookup does.
type phase uint8

const (
	claiming phase = iota
	succeeded
	failed
)

// reserve writes the pending reservation of t's value for the group's
// owner, and reports whether another holds the value.
func (g *group) reserve(ctx context.Context, t *target) (heldByOther bool, err error) {
	rctx, end := observe.StartStepOn(ctx, g.h.tracer, observe.StepReservationWrite, t.rule.field)
	held, ok, err := t.rule.reserve.Reserve(rctx, t.key, g.h.owner, t.rule.maxLag)
	end(err)
	if err != nil {
		return false, fmt.Errorf("field %s: reservation: %w", t.rule.field, err)
	}
	t.reserved = ok
	if ok && held.Owner == g.h.owner {
		// This command's own earlier reservation (a redelivery): kept.
		t.inherited, t.confirmed = true, held.Confirmed
	}
	if ok && !t.confirmed {
		g.h.m.resv.pending.Add(1)
	}
	return !ok, nil
}

// drop deletes the reservation of t's value, which the lookup shows: it is
// taken for good. A failure is logged; the sweeper drops it later.
func (g *group) drop(ctx context.Context, t *target) {
	if err := t.rule.reserve.Drop(ctx, t.key); err != nil && ctx.Err() == nil {
		g.h.m.logger.LogAttrs(ctx, slog.LevelWarn, "cannot drop a reservation the read model shows",
			slog.String("command_id", g.h.owner), slog.String("key", t.key.String()), slog.Any("error", err))
	}
}

// cancelReserved cancels the pending reservations the group wrote, so that
// their values are free at once: the command will not run. It runs while
// the group's lock is held.
func (g *group) cancelReserved(ctx context.Context) {
	for i := range g.targets {
		t := &g.targets[i]
		if !t.reserved || t.confirmed {
			continue
		}
		if t.inherited {
			// Never cancelled: the earlier run may have written the value.
			// It stays pending, in doubt for maxLag.
			g.h.m.resv.pending.Add(-1)
			continue
		}
		t.reserved = false
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), middleware.DefaultReleaseTimeout)
		cctx, end := observe.StartStepOn(cctx, g.h.tracer, observe.StepReservationWrite, t.rule.field)
		err := t.rule.reserve.Cancel(cctx, t.key, g.h.owner)
		end(err)
		cancel()
		if err == nil {
			g.h.m.resv.settled(&g.h.m.resv.cancelled)
		} else {
			g.h.m.resv.pending.Add(-1) // no longer this process's to settle
			g.h.m.logger.LogAttrs(ctx, slog.LevelWarn,
				"cannot cancel a reservation: its value stays taken until the lookup shows it or maxLag passes",
				slog.String("command_id", g.h.owner), slog.String("key", t.key.String()), slog.Any("error", err))
		}
	}
}

// confirm confirms every reservation the command holds and has not
// confirmed yet, and returns what failed.
func (h *held) confirm(ctx context.Context) error {
	var errs []error
	for gi := range h.groups {
		g := &h.groups[gi]
		for i := range g.targets {
			t := &g.targets[i]
			if !t.reserved || t.confirmed {
				continue
			}
			cctx, end := observe.StartStepOn(ctx, g.h.tracer, observe.StepReservationWrite, t.rule.field)
			err := t.rule.reserve.Confirm(cctx, t.key, g.h.owner)
			end(err)
			if err != nil {
				errs = append(errs, fmt.Errorf("uniqueness: confirm the reservation of %s: %w", t.key, err))
				continue
			}
			t.confirmed = true
			g.h.m.resv.settled(&g.h.m.resv.confirmed)
		}
	}
	return errors.Join(errs...)
}

// settle records how the command ended, before the claims are released
// (their re-checks read it): after a success it starts the confirmation of
// the reservations not confirmed yet (see confirmLater); after a failure
// it cancels them.
func (m *Middleware) settle(ctx context.Context, p *middleware.Pipeline, h *held, ok bool) {
	if !h.reserves {
		return
	}
	// A handler that called Committed wrote its values: they stay reserved
	// whatever it returned.
	ok = ok || h.committed
	ph := failed
	if ok {
		ph = succeeded
		m.confirmLater(ctx, p.CommandUUID, h)
	}
	for gi := range h.groups {
		g := &h.groups[gi]
		g.phase = ph
		if !ok {
			g.cancelReserved(ctx)
		}
	}
}

// pendingConfirm is a reservation to confirm: its value, owner and store.
type pendingConfirm struct {
	store claimstore.Reservations
	key   lockstore.Key
	owner string
}

// confirmLater confirms the reservations of h, a command that succeeded,
// that are not confirmed yet, on a goroutine of the middleware's (Flush
// waits for it), so that neither the release of the claims nor the answer
// to the sender waits for the confirmation. That is safe: until it is
// confirmed, a reservation of a command that succeeded is pending with an
// owner, so the next claimant of its value finds it taken for maxLag (and
// the release re-checks count it taken without the store). The goroutine
// reads nothing of h after confirmLater returns; each confirmation that
// fails is logged.
func (m *Middleware) confirmLater(ctx context.Context, commandID string, h *held) {
	var todo []pendingConfirm
	for gi := range h.groups {
		g := &h.groups[gi]
		for i := range g.targets {
			if t := &g.targets[i]; t.reserved && !t.confirmed {
				todo = append(todo, pendingConfirm{store: t.rule.reserve, key: t.key, owner: h.owner})
			}
		}
	}
	if len(todo) == 0 {
		return
	}
	ctx = context.WithoutCancel(ctx)
	m.confirms.start()
	go func() {
		defer m.confirms.done()
		cctx, cancel := context.WithTimeout(ctx, middleware.DefaultReleaseTimeout)
		defer cancel()
		for _, c := range todo {
			err := c.store.Confirm(cctx, c.key, c.owner)
			switch {
			case err == nil:
				m.resv.settled(&m.resv.confirmed)
			case errors.Is(err, claimstore.ErrNotReserved):
				m.resv.pending.Add(-1)
				m.logger.LogAttrs(ctx, slog.LevelWarn,
					"reservation gone before its confirmation: dropped because the lookup shows its value, or taken over after maxLag",
					slog.String("command_id", commandID), slog.String("key", c.key.String()), slog.Any("error", err))
			default:
				m.resv.pending.Add(-1) // no longer this process's to settle
				m.logger.LogAttrs(ctx, slog.LevelError,
					"reservation not confirmed: its value stays taken until the lookup shows it or maxLag passes",
					slog.String("command_id", commandID), slog.String("key", c.key.String()), slog.Any("error", err))
			}
		}
	}()
}

// inFlight counts the goroutines of a middleware that confirm
// reservations, for Flush.
type inFlight struct {
	mu   sync.Mutex
	n    int
	idle chan struct{} // closed when n falls to 0
}

func (f *inFlight) start() {
	f.mu.Lock()
	if f.n == 0 {
		f.idle = make(chan struct{})
	}
	f.n++
	f.mu.Unlock()
}

func (f *inFlight) done() {
	f.mu.Lock()
	f.n--
	if f.n == 0 {
		close(f.idle)
	}
	f.mu.Unlock()
}

// wait returns when none runs, or ctx's error when ctx ends first.
func (f *inFlight) wait(ctx context.Context) error {
	f.mu.Lock()
	if f.n == 0 {
		f.mu.Unlock()
		return nil
	}
	idle := f.idle
	f.mu.Unlock()
	select {
	case <-idle:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Flush waits until the confirmations of reservations that AfterDispatch
// started have ended (each within middleware.DefaultReleaseTimeout; the
// failures are logged), or ctx ends. AfterDispatch returns before the
// reservations of the command are confirmed (see uniqueness/README.md);
// call Flush when shutting down, once no command runs any more, so that
// the process does not exit before them. It returns ctx's error when ctx
// ended first.
func (m *Middleware) Flush(ctx context.Context) error {
	return m.confirms.wait(ctx)
}

// heldKey is the key under which the handler's context carries its
// command's held claims, for Committed.
type heldKey struct{}

// Committed confirms the reservations of the command whose handler ctx
// belongs to, at once. A handler that commits its write and then may fail
// (publishing an event, calling a service) calls it right after the
// commit: the values then stay reserved whatever the handler returns, so a
// failure after the commit cannot free a value the read model will show.
// Without it a failed handler frees its values at once, which is right
// only when it wrote nothing.
//
// It returns nil when the command holds no reservations (no rule of its
// reserves, or ctx is not a handler's context from the Uniqueness
// middleware), and the confirmations that failed otherwise; the after
// hooks try those again. Call it from the handler's goroutine.
func Committed(ctx context.Context) error {
	h, _ := ctx.Value(heldKey{}).(*held)
	if h == nil {
		return nil
	}
	h.committed = true
	return h.confirm(ctx)
}

// Free frees value in scope, as an application does when the value is no
// longer used (an account deleted, an email changed): it drops the value's
// reservation under the value's claim, so the next claim of it succeeds
// once the lookup does not show the value either. value is normalised as
// the scope's rules normalise it. Free fails with an error matching
// ErrNoReservations when no rule of scope reserves.
func (m *Middleware) Free(ctx context.Context, scope, value string) error {
	r := m.reserver(scope)
	if r == nil {
		return fmt.Errorf("%w: scope %.40q", ErrNoReservations, scope)
	}
	if r.normalize != nil {
		value = r.normalize(value)
	}
	key := lockstore.Key{Namespace: scope, ID: value}
	if err := key.Validate(); err != nil {
		return fmt.Errorf("uniqueness: free: %w", err)
	}
	cl, err := m.claimer.claim(ctx, key, lookupFunc(neverTaken), m.timeout, nil)
	if err != nil {
		return fmt.Errorf("uniqueness: free %s: %w", key, err)
	}
	err = r.reserve.Drop(ctx, key)
	if err != nil {
		err = fmt.Errorf("uniqueness: free %s: %w", key, err)
	}
	return errors.Join(err, cl.Release(context.WithoutCancel(ctx)))
}

// neverTaken is the lookup of a claim taken only to hold the key: its
// release lets the next claimant run its own lookup.
func neverTaken(context.Context) (bool, error) { return false, nil }

// reserver returns the first rule of scope that reserves, or nil.
func (m *Middleware) reserver(scope string) *Rule {
	for i := range m.rules {
		if r := &m.rules[i]; r.scope == scope && r.reserve != nil {
			return r
		}
	}
	return nil
}

// checkScopes reports scopes whose rules disagree on reservations.
func checkScopes(rules []Rule) []error {
	var errs []error
	first := map[string]*Rule{}
	for i := range rules {
		r := &rules[i]
		if r.cmdType == nil || r.err != nil {
			continue
		}
		f, ok := first[r.scope]
		if !ok {
			first[r.scope] = r
			continue
		}
		switch {
		case (f.reserve == nil) != (r.reserve == nil):
			errs = append(errs, fmt.Errorf("uniqueness: Config.Rules[%d]: scope %q: some of its rules reserve and some do not", i, r.scope))
		case f.reserve != nil && (!sameStore(f.reserve, r.reserve) || f.maxLag != r.maxLag):
			errs = append(errs, fmt.Errorf("uniqueness: Config.Rules[%d]: scope %q: its rules reserve in different stores or with different maxLags", i, r.scope))
		}
	}
	return errs
}

// sameStore reports whether a and b are the same store.
func sameStore(a, b claimstore.Reservations) bool {
	ta, tb := reflect.TypeOf(a), reflect.TypeOf(b)
	return ta == tb && ta.Comparable() && a == b
}
