package uniqueness

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"slices"
	"sync/atomic"
	"time"

	"github.com/google/uuid"

	"github.com/claimbus/claimbus/internal/lockext"
	"github.com/claimbus/claimbus/internal/observe"
	"github.com/claimbus/claimbus/lockstore"
	"github.com/claimbus/claimbus/middleware"
)

// DefaultClaimTimeout bounds the wait for the claims of one command when
// Config.ClaimTimeout is zero.
const DefaultClaimTimeout = 15 * time.Second

// assignClaims is the key under which BeforeDispatch keeps the claims it
// took in the pipeline's Assigns.
const assignClaims = "uniqueness.claims"

// held is what BeforeDispatch keeps under assignClaims: the claims, and the
// cancel function of the handler's context; with room for the targets and
// lookups of a command with few unique fields, so that one allocation
// serves them all.
type held struct {
	claims []*hold
	cancel context.CancelCauseFunc
	// groups are the command's groups of targets; reserves is set when a
	// rule of one of them reserves.
	groups   []group
	reserves bool
	// m and owner (the command's id) serve the reservations; tracer is
	// told about the command's steps, nil when none is set; endHold ends
	// the step of holding the claims (observe.StepClaimHold).
	m     *Middleware
	owner string
	// committed is set by Committed: the handler's write committed, so its
	// reservations are kept whatever the handler returns.
	committed bool
	tracer    observe.Tracer
	endHold   observe.EndFunc
	claimBuf  [2]*hold
	targets   [4]target
	groupBuf  [2]group
}

// group is the targets of one command that the store maps to one lock; it
// is claimed once, and its lookup checks every value.
type group struct {
	targets []target
	// hit is the rule whose lookup found its value taken or failed.
	hit *Rule
	// h is the command's; phase serves the reservations of the group's
	// rules.
	h     *held
	phase phase
}

// probe returns the lookup of a group of one value whose rule has SQL
// (FieldSQL), while claiming, for the lock store to run in the lock's
// round trip.
func (g *group) probe() (lockext.Probe, bool) {
	if len(g.targets) != 1 || g.phase != claiming {
		return lockext.Probe{}, false
	}
	t := &g.targets[0]
	if t.rule.probe == "" || t.confirmed {
		return lockext.Probe{}, false
	}
	return lockext.Probe{SQL: t.rule.probe, Value: t.key.ID, By: t.rule.takenBy != nil}, true
}

// probed records the answer of the group's probe (see probe).
func (g *group) probed(found lockext.Found) {
	g.targets[0].probed, g.targets[0].probeFound = true, found
}

// taken reports whether a value of the group is taken, stopping at the
// first. While claiming, a value is taken when its lookup finds it or,
// for a rule that reserves, when another holds its reservation; a free
// value of such a rule is reserved for the command. At the re-check of a
// release, a value the command reserved and succeeded with is taken (so
// waiters fail at once); the others are looked up.
func (g *group) taken(ctx context.Context) (bool, error) {
	for i := range g.targets {
		t := &g.targets[i]
		if t.confirmed || (g.phase != claiming && t.inherited) || (g.phase == succeeded && t.reserved) {
			g.hit = t.rule
			return true, nil
		}
		var found lockext.Found
		var err error
		if t.probed {
			found, t.probed = t.probeFound, false
		} else {
			lctx, end := observe.StartStepOn(ctx, g.h.tracer, observe.StepLookup, t.rule.field)
			found, err = t.rule.taken(lctx, t.key.ID)
			end(err)
		}
		taken := found.Taken
		t.by, t.byKnown = found.By, err == nil
		if err != nil {
			g.hit = t.rule
			if g.phase == claiming {
				g.cancelReserved(ctx)
			}
			return false, fmt.Errorf("field %s: %w", t.rule.field, err)
		}
		if taken {
			g.hit = t.rule
			if g.phase == claiming && t.rule.reserve != nil {
				g.cancelReserved(ctx)
				g.drop(ctx, t)
			}
			return true, nil
		}
		if g.phase == claiming && t.rule.reserve != nil {
			heldByOther, err := g.reserve(ctx, t)
			if err != nil || heldByOther {
				g.hit = t.rule
				g.cancelReserved(ctx)
				return heldByOther, err
			}
		}
	}
	return false, nil
}

// releaseErrorFunc is Config.OnReleaseError.
type releaseErrorFunc = func(ctx context.Context, commandID string, key lockstore.Key, err error)

// Config configures the Uniqueness middleware.
type Config struct {
	// Locker takes the keys of the claims. Required. Every node that
	// handles the commands must use stores that see each other's locks
	// (the PostgreSQL store on one database); the memory store serves one
	// process.
	Locker lockstore.Locker
	// Rules name the unique fields, made with Field. At least one.
	Rules []Rule
	// ClaimTimeout bounds the wait for all the claims of one command;
	// past it the command halts with a timeout rejection. It bounds the
	// wait, never the holding: a claim is held until the handler returns.
	// Lookups run under the command's context, not under this bound.
	// Default DefaultClaimTimeout.
	ClaimTimeout time.Duration
	// Logger logs each release that reported an error, which the after
	// hooks cannot return, with the command's id ("command_id") and the
	// claim's key ("key"): at Error when the claim's lock was lost while
	// the command ran (the error matches lockstore.ErrLockLost: another
	// claimant may have taken the value meanwhile), at Warn otherwise.
	// Default slog.Default().
	Logger *slog.Logger
	// OnReleaseError, when set, is also told about each release that
	// reported an error, after it is logged: a claim of the command
	// commandID (its middleware.Pipeline.CommandUUID) on key whose release
	// reported err, a failed re-check or an error matching
	// lockstore.ErrLockLost (the claim's lock was lost before the release,
	// or its unlock went unconfirmed). The claim is released all the same;
	// it is for metrics or alerts. Default nil: logged only. A release the
	// store confirms later (lockext.ReleaseLater) reports from the
	// store's goroutine, possibly after the command returned: it must be
	// quick and not block.
	OnReleaseError func(ctx context.Context, commandID string, key lockstore.Key, err error)
}

// Validate reports every problem of the configuration at once.
func (c Config) Validate() error {
	var errs []error
	if c.Locker == nil {
		errs = append(errs, errors.New("uniqueness: Config.Locker is nil (give a lockstore store, such as lockstore.NewMemory)"))
	}
	if c.ClaimTimeout < 0 {
		errs = append(errs, fmt.Errorf("uniqueness: Config.ClaimTimeout is negative (%v)", c.ClaimTimeout))
	}
	if len(c.Rules) == 0 {
		errs = append(errs, errors.New("uniqueness: Config.Rules is empty (make rules with uniqueness.Field)"))
	}
	type field struct {
		t    reflect.Type
		name string
	}
	seen := make(map[field]bool, len(c.Rules))
	for i, r := range c.Rules {
		switch {
		case r.cmdType == nil:
			errs = append(errs, fmt.Errorf("uniqueness: Config.Rules[%d] is a zero Rule (make rules with uniqueness.Field)", i))
		case r.err != nil:
			errs = append(errs, fmt.Errorf("uniqueness: Config.Rules[%d]: %w", i, r.err))
		case seen[field{r.cmdType, r.field}]:
			errs = append(errs, fmt.Errorf("uniqueness: Config.Rules[%d]: a second rule for field %q of %v", i, r.field, r.cmdType))
		default:
			seen[field{r.cmdType, r.field}] = true
		}
	}
	errs = append(errs, checkScopes(c.Rules)...)
	return errors.Join(errs...)
}

// Middleware is the Uniqueness middleware: before a command's handler runs
// it claims every unique field of the command, and it releases the claims
// after the handler returns (see uniqueness/README.md). Use one per
// pipeline, with all the rules. It is safe for concurrent use.
type Middleware struct {
	claimer        *claimer
	rules          []Rule
	timeout        time.Duration
	logger         *slog.Logger
	onReleaseError releaseErrorFunc
	compare        func(a, b lockstore.Key) int
	// confirms counts the confirmations of reservations under way.
	confirms inFlight
	// resv counts the reservations of this middleware (see Stats).
	resv reservationCounts
	// reserves: a rule reserves, so a sweeper must run; swept is set when
	// one starts (RunSweeper or Sweep), unswept once the missing sweeper
	// is reported.
	reserves       bool
	swept, unswept atomic.Bool
}

var _ middleware.Middleware = (*Middleware)(nil)

// New returns the Uniqueness middleware configured by cfg.
func New(cfg Config) (*Middleware, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	compare := lockext.CompareKeys[lockstore.Key]
	if o, ok := cfg.Locker.(lockext.KeyOrder[lockstore.Key]); ok {
		compare = o.CompareKeys
	}
	m := &Middleware{
		claimer:        makeClaimer(cfg.Locker),
		rules:          slices.Clone(cfg.Rules),
		timeout:        cmp.Or(cfg.ClaimTimeout, DefaultClaimTimeout),
		logger:         cmp.Or(cfg.Logger, slog.Default()),
		onReleaseError: cfg.OnReleaseError,
		compare:        compare,
	}
	m.reserves = len(m.sweepers()) > 0
	return m, nil
}

// claimsOf returns the claims the Uniqueness middleware holds for the
// command p carries, in the order they were taken; nil when it holds none.
func claimsOf(p *middleware.Pipeline) []*hold {
	v, _ := p.Assigned(assignClaims)
	if h, ok := v.(*held); ok {
		return h.claims
	}
	return nil
}

// target is one unique value of a command: its key and the rule it comes
// from.
type target struct {
	key  lockstore.Key
	rule *Rule
	// reserved and confirmed follow the command's reservation of the value;
	// inherited is set when the reservation was the command's own already
	// (a redelivery), which is never cancelled: the earlier run may have
	// written the value.
	reserved, confirmed, inherited bool
	// probed is set when the lock's round trip answered the lookup (see
	// FieldSQL), and probeFound is its answer, used by the next taken.
	probed     bool
	probeFound lockext.Found
	// by is who took the value, as the command's own lookup found it (see
	// TakenBy), when byKnown.
	by      string
	byKnown bool
}

// done reports whether the command's own earlier, committed run took t's
// value: the rule's AlreadyDone, or, with TakenBy, whether the one who
// took it (as the command's own lookup found, or the lookup run now when
// the command ran none) is the command.
func (t *target) done(ctx context.Context, cmd any) (bool, error) {
	if t.rule.takenBy == nil {
		return t.rule.done(ctx, cmd, t.key.ID)
	}
	if !t.byKnown {
		found, err := t.rule.taken(ctx, t.key.ID)
		if err != nil {
			return false, err
		}
		t.by, t.byKnown = found.By, true
	}
	return t.by != "" && t.by == t.rule.takenBy(cmd), nil
}

// BeforeDispatch claims every unique field of the command, all or nothing,
// in the Locker's key order (so two commands sharing two values can never
// deadlock, on any node), and keeps the claims in the pipeline
// (assignClaims). It halts the command, having released whatever it
// claimed, with:
//   - a rejection matching middleware.ErrAlreadyTaken and naming the field
//     (never the value) when the value is taken;
//   - nil when the value is taken by this very command's earlier, committed
//     run (a rule's AlreadyDone or TakenBy), so a redelivery counts as done;
//   - a rejection matching middleware.ErrTimeout when the claims took
//     longer than ClaimTimeout;
//   - a rejection matching middleware.ErrUnavailable when a lookup or the
//     lock store failed (the cause is wrapped beside it, and left out of
//     the rejection's message, which crosses the wire);
//   - a rejection matching middleware.ErrInvalid when a value is too long
//     to be a lock key;
//   - ctx's error when ctx ended.
//
// Once every claim is taken, the rules with WriteBack write their claimed
// values into the command. The handler's context is cancelled, with
// lockstore.ErrLockLost as its cause, when a claim is lost while the handler runs.
func (m *Middleware) BeforeDispatch(ctx context.Context, p *middleware.Pipeline) {
	if m.reserves && !m.swept.Load() && m.unswept.CompareAndSwap(false, true) {
		m.logger.LogAttrs(ctx, slog.LevelWarn, "uniqueness: a rule reserves, but no sweeper runs: start RunSweeper before the first command, "+
			"or confirmed reservations are never dropped and pending ones of a node that died never expire")
	}
	var h *held
	var targets []target
	for i := range m.rules {
		r := &m.rules[i]
		if v, ok := r.value(p.Command); ok && v != "" {
			if h == nil {
				h = &held{}
				targets = h.targets[:0]
			}
			targets = append(targets, target{key: lockstore.Key{Namespace: r.scope, ID: v}, rule: r})
		}
	}
	if h == nil {
		return
	}
	ctx, tr := stepTracer(ctx, p)
	owner := p.CommandUUID
	for _, t := range targets {
		if t.rule.reserve != nil {
			h.reserves = true
			if owner == "" {
				owner = uuid.NewString() // a reservation needs an owner
			}
		}
	}
	h.m, h.owner, h.tracer = m, owner, tr
	if len(targets) > 1 {
		slices.SortStableFunc(targets, func(a, b target) int { return m.compare(a.key, b.key) })
	}

	groups := h.groupBuf[:]
	if len(targets) > len(groups) {
		groups = make([]group, len(targets))
	}
	claims := h.claimBuf[:0]
	var start time.Time
	if len(targets) > 1 {
		start = time.Now() // ClaimTimeout bounds the waits of all the claims together
	}
	for i, n := 0, 0; i < len(targets); n++ {
		// Keys the store maps to one lock are claimed once, checking all
		// their values.
		j := i + 1
		for j < len(targets) && m.compare(targets[i].key, targets[j].key) == 0 {
			j++
		}
		g := &groups[n]
		g.targets, g.h = targets[i:j:j], h
		h.groups = groups[:n+1]
		wait := m.timeout
		if i > 0 {
			wait = max(m.timeout-time.Since(start), time.Nanosecond)
		}
		i = j
		wctx, end := observe.StartStepOn(ctx, tr, observe.StepClaimWait, g.targets[0].rule.field)
		cl, err := m.claimer.claim(wctx, g.targets[0].key, g, wait, tr)
		end(err)
		if err != nil {
			m.settle(ctx, p, h, false)
			m.releaseAll(ctx, p.CommandUUID, claims, true)
			m.halt(ctx, p, targets, cmp.Or(g.hit, g.targets[0].rule).field, err)
			return
		}
		claims = append(claims, cl)
	}
	hctx, cancel := context.WithCancelCause(p.Context())
	if h.reserves {
		hctx = context.WithValue(hctx, heldKey{}, h)
	}
	p.SetContext(hctx)
	h.claims, h.cancel = claims, cancel
	_, h.endHold = observe.StartStepOn(ctx, tr, observe.StepClaimHold, p.CommandName)
	for _, cl := range claims {
		m.claimer.watchLost(cl, cancel)
	}
	p.Assign(assignClaims, h)
	writeBack(p, targets) // after Assign: a panic in it still releases the claims
}

// stepTracer returns the observe.Tracer of p's handler context, where a
// telemetry middleware sets it, or nil, looked up once per command; and
// ctx carrying it, for the steps of the stores below (ctx itself when
// there is none).
func stepTracer(ctx context.Context, p *middleware.Pipeline) (context.Context, observe.Tracer) {
	t := observe.TracerFromContext(p.Context())
	if t != nil {
		ctx = observe.ContextWithTracer(ctx, t)
	}
	return ctx, t
}

// halt stops the command whose claim on field failed with err.
func (m *Middleware) halt(ctx context.Context, p *middleware.Pipeline, targets []target, field string, err error) {
	switch {
	case errors.Is(err, middleware.ErrAlreadyTaken):
		for i := range targets {
			t := &targets[i]
			if t.rule.done == nil && t.rule.takenBy == nil {
				continue
			}
			done, derr := t.done(ctx, p.Command)
			if derr != nil {
				p.Halt(fmt.Errorf("%w: %w", middleware.Reject(middleware.CodeUnavailable, t.rule.field,
					"cannot tell whether this command already took its %s now, try again", t.rule.field), derr))
				return
			}
			if done {
				p.Halt(nil)
				return
			}
		}
		p.Halt(middleware.Reject(middleware.CodeAlreadyTaken, field, "%s is already taken", field))
	case ctx.Err() != nil:
		p.Halt(fmt.Errorf("uniqueness: claim on field %s: %w", field, err))
	default:
		p.Halt(middleware.RejectStoreError(err, field, func(code string) string { return storeMessage(code, field, m.timeout) }))
	}
}

// storeMessage is the message of the rejection with code of a claim on
// field whose store failed (see middleware.RejectStoreError).
func storeMessage(code, field string, timeout time.Duration) string {
	switch code {
	case middleware.CodeTimeout:
		return fmt.Sprintf("waited more than %v to claim %s: another command holds it, try again", timeout, field)
	case middleware.CodeInvalid:
		return fmt.Sprintf("%s cannot be claimed: too long or not UTF-8", field)
	case middleware.CodeLocked:
		return fmt.Sprintf("%s is claimed by another command, try again", field)
	}
	return fmt.Sprintf("cannot check that %s is unique now, try again", field)
}

// AfterDispatch releases the claims after the handler succeeded. Each
// release runs the lookup again when claimants wait, so they fail at once
// now that the value exists. It starts the confirmation of the command's
// reservations and returns without waiting for it (see Flush).
func (m *Middleware) AfterDispatch(ctx context.Context, p *middleware.Pipeline) {
	m.release(ctx, p, true)
}

// AfterFailure releases the claims after the handler failed or panicked,
// or the command was halted; the next claimant takes its turn.
func (m *Middleware) AfterFailure(ctx context.Context, p *middleware.Pipeline) {
	m.release(ctx, p, false)
}

// release settles the reservations of a command that succeeded (ok) or
// failed, releases its claims, and ends the handler's context.
func (m *Middleware) release(ctx context.Context, p *middleware.Pipeline, ok bool) {
	v, _ := p.Assigned(assignClaims)
	h, isHeld := v.(*held)
	if !isHeld {
		return
	}
	if h.tracer != nil {
		ctx = observe.ContextWithTracer(ctx, h.tracer)
	}
	m.settle(ctx, p, h, ok)
	m.releaseAll(ctx, p.CommandUUID, h.claims, false)
	h.cancel(context.Canceled)
	h.endHold(p.Err())
}

// releaseAll releases the claims of command commandID in reverse order,
// reporting each release that fails (see releaseFailed). detach gives the
// releases a context of their own, bounded by
// middleware.DefaultReleaseTimeout, for when ctx may be done.
func (m *Middleware) releaseAll(ctx context.Context, commandID string, claims []*hold, detach bool) {
	if len(claims) == 0 {
		return
	}
	if detach {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(context.WithoutCancel(ctx), middleware.DefaultReleaseTimeout)
		defer cancel()
	}
	for i := len(claims) - 1; i >= 0; i-- {
		cl := claims[i]
		// A command that ends normally does not wait for its store to
		// confirm an uncontended release (lockext.LaterReleaser): the
		// PostgreSQL store then carries the unlock in its next round trip.
		var later func(error)
		if !detach && cl.releasesLater() {
			later = m.reportLater(ctx, commandID, cl.Key())
		}
		if err, async := cl.releaseWith(ctx, later); !async && err != nil {
			m.releaseFailed(ctx, commandID, cl.Key(), err)
		}
	}
}

// reportLater returns the function that reports the result of a release
// the store confirms later (see Claim.releaseWith). It is made here, not in
// releaseAll, so that releaseAll's variables stay on its stack.
func (m *Middleware) reportLater(ctx context.Context, commandID string, key lockstore.Key) func(error) {
	return func(err error) {
		if err != nil {
			m.releaseFailed(ctx, commandID, key, err)
		}
	}
}

// releaseFailed logs the failed release of the claim on key of command
// commandID, at Error when its lock was lost, and tells OnReleaseError.
func (m *Middleware) releaseFailed(ctx context.Context, commandID string, key lockstore.Key, err error) {
	level, msg := slog.LevelWarn, "claim release failed"
	if errors.Is(err, lockstore.ErrLockLost) {
		level, msg = slog.LevelError, "claim lost while the command ran"
	}
	m.logger.LogAttrs(ctx, level, msg,
		slog.String("command_id", commandID), slog.String("key", key.String()), slog.Any("error", err))
	if m.onReleaseError != nil {
		m.onReleaseError(ctx, commandID, key, err)
	}
}
