package txcommand

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"time"

	"github.com/claimbus/claimbus/claimstore"
	"github.com/claimbus/claimbus/idempotency"
	"github.com/claimbus/claimbus/internal/observe"
	"github.com/claimbus/claimbus/lockstore"
	"github.com/claimbus/claimbus/lockstore/postgres"
	"github.com/claimbus/claimbus/middleware"
	"github.com/claimbus/claimbus/uniqueness"
)

// Rule says that one field of commands of type C is unique within a
// scope, checked in the command's transaction. Make one with Unique.
type Rule struct {
	cmdType   reflect.Type
	names     uniqueness.Names
	match     func(cmd any) (string, bool)
	normalize func(value string) string
	lookup    string
	reserve   bool
	err       error
}

// RuleOption adds to a Rule made by Unique: Normalize or Reserve.
type RuleOption func(*Rule)

// Normalize makes a rule claim and look up f(value) instead of the value
// as the command carries it, such as uniqueness.NormalizeEmail.
func Normalize(f func(value string) string) RuleOption {
	return func(r *Rule) {
		if f == nil {
			r.err = errors.Join(r.err, errors.New("nil Normalize function"))
		}
		r.normalize = f
	}
}

// Reserve makes a rule write a reservation of each value it claims, in
// the command's transaction, for a read model that lags behind the
// handler's writes (an event-sourced model whose projection applies the
// events later): the value is taken when the lookup finds it or when it
// is reserved. The reservation commits with the handler's writes, so it
// exists exactly when they do. Drop it once the read model shows the
// value (claimstore.Reservations.Drop, or a uniqueness sweeper).
func Reserve() RuleOption { return func(r *Rule) { r.reserve = true } }

// Unique returns the rule that the field value reads from commands of
// type C (as the pipeline carries them: *commands.CreateStaff) is unique
// within names.Scope. lookup is SQL run in the command's transaction,
// after the value's lock is granted and in the same round trip: it gets
// the normalised value as $1 (text) and returns a row when the value is
// taken, such as "SELECT 1 FROM staff WHERE email = $1" (SQLite reads $1
// too). It runs in the transaction, so it sees every committed write;
// make it an index lookup.
// An empty value claims nothing: reject it with validation.
func Unique[C any](names uniqueness.Names, value func(C) string, lookup string, opts ...RuleOption) Rule {
	r := Rule{cmdType: reflect.TypeFor[C](), names: names, lookup: lookup}
	var errs []error
	if names.Field == "" {
		errs = append(errs, errors.New("empty field name"))
	}
	if err := (lockstore.Key{Namespace: names.Scope, ID: "x"}).Validate(); err != nil {
		errs = append(errs, fmt.Errorf("scope %.40q is not a valid lock namespace: %w", names.Scope, err))
	}
	if value == nil {
		errs = append(errs, errors.New("nil value function"))
	} else {
		r.match = func(cmd any) (string, bool) {
			c, ok := cmd.(C)
			if !ok {
				return "", false
			}
			return value(c), true
		}
	}
	if lookup == "" {
		errs = append(errs, errors.New("empty lookup SQL"))
	}
	for _, o := range opts {
		if o == nil {
			errs = append(errs, errors.New("nil option"))
			continue
		}
		o(&r)
	}
	if err := errors.Join(append(errs, r.err)...); err != nil {
		r.err = fmt.Errorf("txcommand: rule for field %q of %v: %w", names.Field, r.cmdType, err)
	}
	return r
}

// Idempotency configures the commands' idempotency keys.
type Idempotency struct {
	// Key returns a command's key; an empty key runs the command without
	// one. Required: idempotency.CommandUUID (a redelivered message is
	// answered from its first run) or idempotency.FromMetadata.
	Key idempotency.KeyFunc
	// Retention is how long an outcome is kept. Required.
	Retention time.Duration
	// Fingerprint identifies a payload. Default idempotency.SHA256JSON.
	Fingerprint idempotency.FingerprintFunc
}

// Config configures the Middleware.
type Config struct {
	// Backend is the database the transactions run on, with its lock and
	// claim stores: Postgres(locks, claims) or SQLite(locks, claims).
	// Required.
	Backend Backend
	// Rules name the unique fields, made with Unique.
	Rules []Rule
	// Idempotency, when set, answers every repeat of a key with the
	// committed outcome of its first run.
	Idempotency *Idempotency
	// ClaimTimeout bounds the wait for the command's locks, past which it
	// halts with a timeout rejection. Default
	// uniqueness.DefaultClaimTimeout.
	ClaimTimeout time.Duration
	// Logger logs what the hooks cannot return: an outcome whose result
	// cannot be encoded, a final rejection whose outcome could not be
	// committed. Default slog.Default().
	Logger *slog.Logger
}

// Validate reports every problem of the configuration.
func (c Config) Validate() error {
	var errs []error
	if c.Backend == nil {
		errs = append(errs, errors.New("txcommand: Config.Backend is nil (txcommand.Postgres or txcommand.SQLite)"))
	}
	if c.ClaimTimeout < 0 {
		errs = append(errs, fmt.Errorf("txcommand: Config.ClaimTimeout is negative (%v)", c.ClaimTimeout))
	}
	if len(c.Rules) == 0 && c.Idempotency == nil {
		errs = append(errs, errors.New("txcommand: neither Config.Rules nor Config.Idempotency is set: the middleware would only open transactions"))
	}
	needClaims := c.Idempotency != nil
	type field struct {
		t    reflect.Type
		name string
	}
	seen := map[field]bool{}
	for i, r := range c.Rules {
		switch {
		case r.cmdType == nil:
			errs = append(errs, fmt.Errorf("txcommand: Config.Rules[%d] is a zero Rule (make rules with txcommand.Unique)", i))
		case r.err != nil:
			errs = append(errs, fmt.Errorf("txcommand: Config.Rules[%d]: %w", i, r.err))
		case seen[field{r.cmdType, r.names.Field}]:
			errs = append(errs, fmt.Errorf("txcommand: Config.Rules[%d]: a second rule for field %q of %v", i, r.names.Field, r.cmdType))
		}
		seen[field{r.cmdType, r.names.Field}] = true
		needClaims = needClaims || r.reserve
	}
	if c.Backend != nil {
		errs = append(errs, c.Backend.check(needClaims))
	}
	if id := c.Idempotency; id != nil {
		if id.Key == nil {
			errs = append(errs, errors.New("txcommand: Config.Idempotency.Key is nil (idempotency.CommandUUID or idempotency.FromMetadata)"))
		}
		if id.Retention <= 0 {
			errs = append(errs, fmt.Errorf("txcommand: Config.Idempotency.Retention is %v, want > 0", id.Retention))
		}
	}
	return errors.Join(errs...)
}

// Middleware runs each command in a transaction of its Backend that holds
// its claims, and commits its writes, its reservations and its outcome
// together (see the package documentation). It is safe for concurrent use.
type Middleware struct {
	backend     Backend
	rules       []Rule
	key         idempotency.KeyFunc // nil: no idempotency
	retention   time.Duration
	fingerprint idempotency.FingerprintFunc
	timeout     time.Duration
	logger      *slog.Logger
}

var _ middleware.Middleware = (*Middleware)(nil)

// New returns the middleware configured by cfg.
func New(cfg Config) (*Middleware, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	m := &Middleware{
		backend: cfg.Backend,
		rules:   append([]Rule(nil), cfg.Rules...),
		timeout: cmp.Or(cfg.ClaimTimeout, uniqueness.DefaultClaimTimeout),
		logger:  cmp.Or(cfg.Logger, slog.Default()),
	}
	if id := cfg.Idempotency; id != nil {
		m.key, m.retention, m.fingerprint = id.Key, id.Retention, id.Fingerprint
		if m.fingerprint == nil {
			m.fingerprint = idempotency.SHA256JSON
		}
	}
	return m, nil
}

// Stage places the middleware with the claims: after any middleware that
// answers repeats from a store of its own.
func (m *Middleware) Stage() middleware.Stage { return middleware.StageClaim }

// assignRun is the key under which BeforeDispatch keeps the run.
const assignRun = "txcommand.run"

// run is one command's transaction and what its first round trip read.
type run struct {
	txn txn
	// key is the idempotency key (zero without one), fp the payload's
	// fingerprint, o and found the stored outcome.
	key    lockstore.Key
	fp     []byte
	o      claimstore.Outcome
	found  bool
	checks []check
}

// check is one unique value of the command.
type check struct {
	rule  *Rule
	key   lockstore.Key
	taken bool   // the lookup found it
	owner string // the owner of its reservation, if any
}

// savepoint is where a final rejection rolls back to, keeping the
// transaction's locks, to store its outcome.
const savepoint = "claimbus_command"

// BeforeDispatch opens the command's transaction: it takes the locks of
// the command's idempotency key and unique values, reads the key's
// outcome and looks the values up (in one round trip on PostgreSQL), then
// either answers the command (a stored outcome, already_taken) and rolls
// back, or lets it run in the transaction, which the handler's ctx
// carries (postgres.TxFrom, or lockstore/sqlite.TxFrom).
func (m *Middleware) BeforeDispatch(ctx context.Context, p *middleware.Pipeline) {
	r := &run{}
	var keys []lockstore.Key
	if m.key != nil {
		if id := m.key(p); id != "" {
			r.key = lockstore.Key{Namespace: idempotency.DefaultNamespace + "." + cmp.Or(p.CommandName, fmt.Sprintf("%T", p.Command)), ID: id}
			if err := r.key.Validate(); err != nil {
				p.Halt(middleware.RejectStoreError(err, "", func(string) string { return "the idempotency key cannot be used: too long or not UTF-8" }))
				return
			}
			fp, err := fingerprint(m.fingerprint, p.Command)
			if err != nil {
				p.Halt(fmt.Errorf("%w: %w", middleware.Reject(middleware.CodeInvalid, "",
					"the command cannot be fingerprinted for its idempotency key"), err))
				return
			}
			r.fp = fp
			keys = append(keys, r.key)
		}
	}
	for i := range m.rules {
		rule := &m.rules[i]
		v, ok := rule.match(p.Command)
		if !ok {
			continue
		}
		if rule.normalize != nil {
			v = rule.normalize(v)
		}
		if v == "" {
			continue
		}
		k := lockstore.Key{Namespace: rule.names.Scope, ID: v}
		if err := k.Validate(); err != nil {
			p.Halt(middleware.RejectStoreError(err, rule.names.Field, func(string) string { return "the value cannot be claimed: too long or not UTF-8" }))
			return
		}
		keys = append(keys, k)
		r.checks = append(r.checks, check{rule: rule, key: k})
	}
	if len(keys) == 0 {
		return
	}
	sctx, end := observe.StartStep(p.Context(), observe.StepClaimWait, p.CommandName)
	txn, tctx, err := m.backend.begin(sctx, keys, m.timeout, r)
	end(err)
	if err != nil {
		m.haltBegin(ctx, p, err)
		return
	}
	r.txn = txn
	if m.answered(p, r) {
		_ = txn.rollback()
		return
	}
	p.SetContext(tctx)
	p.Assign(assignRun, r)
}

// answered halts p when its first round trip answers it: a stored
// outcome, a taken value, or the command's own reservation (a redelivery
// whose transaction committed).
func (m *Middleware) answered(p *middleware.Pipeline, r *run) bool {
	if r.found {
		idempotency.Answer(p, r.o, r.fp)
		return true
	}
	for _, c := range r.checks {
		switch {
		case c.owner == p.CommandUUID && c.owner != "":
			p.Halt(nil)
			return true
		case c.taken || c.owner != "":
			p.Halt(middleware.Reject(middleware.CodeAlreadyTaken, c.rule.names.Field, "%s is already taken", c.rule.names.Field))
			return true
		}
	}
	return false
}

// haltBegin stops the command whose transaction could not begin: nothing
// of it applied.
func (m *Middleware) haltBegin(ctx context.Context, p *middleware.Pipeline, err error) {
	switch {
	case ctx.Err() != nil || p.Context().Err() != nil:
		p.Halt(fmt.Errorf("txcommand: begin: %w", err))
	case errors.Is(err, lockstore.ErrTimeout), errors.Is(err, lockstore.ErrInvalidKey):
		p.Halt(middleware.RejectStoreError(err, "", func(code string) string {
			if code == middleware.CodeTimeout {
				return fmt.Sprintf("waited more than %v for the commands ahead of this one on the same values, try again", m.timeout)
			}
			return "the command's keys cannot be claimed"
		}))
	default:
		p.Halt(fmt.Errorf("%w: %w", middleware.Reject(middleware.CodeNotApplied, "",
			"the command's transaction could not begin: nothing applied, try again"), err))
	}
}

// AfterDispatch commits: the reservations and the outcome are written
// with COMMIT (in its round trip on PostgreSQL). A failed commit fails
// the command, with a rejection matching middleware.ErrNotApplied, or
// ErrOutcomeUnknown when COMMIT was sent to PostgreSQL and not answered.
func (m *Middleware) AfterDispatch(ctx context.Context, p *middleware.Pipeline) {
	r := runOf(p)
	if r == nil {
		return
	}
	w := writes{owner: p.CommandUUID, key: r.key, retention: m.retention}
	for _, c := range r.checks {
		if c.rule.reserve {
			w.reserve = append(w.reserve, c.key)
		}
	}
	if r.key != (lockstore.Key{}) {
		o, _, err := idempotency.OutcomeOf(p, r.fp)
		if err != nil {
			// Committed without its outcome, a repeat would run again.
			_ = r.txn.rollback()
			p.Fail(fmt.Errorf("%w: %w", middleware.Reject(middleware.CodeNotApplied, "",
				"the command's result cannot be stored: nothing applied"), err))
			return
		}
		w.outcome = o
	}
	if err := r.txn.commit(ctx, w); err != nil {
		p.Fail(commitError(err))
	}
}

// AfterFailure rolls the transaction back. A final rejection of an
// idempotent command rolls back to before the handler, writes its outcome
// and commits, so that a repeat gets the same answer.
func (m *Middleware) AfterFailure(ctx context.Context, p *middleware.Pipeline) {
	r := runOf(p)
	if r == nil {
		return
	}
	if r.key != (lockstore.Key{}) {
		if o, final, _ := idempotency.OutcomeOf(p, r.fp); final {
			if err := r.txn.commit(ctx, writes{undo: true, key: r.key, outcome: o, retention: m.retention}); err != nil {
				m.logger.LogAttrs(ctx, slog.LevelWarn, "txcommand: the outcome of a final rejection was not stored: a repeat runs again",
					slog.String("command_id", p.CommandUUID), slog.String("key", r.key.String()), slog.Any("error", err))
			}
			return
		}
	}
	if err := r.txn.rollback(); err != nil {
		m.logger.LogAttrs(ctx, slog.LevelWarn, "txcommand: rollback failed (the transaction ends with its session or connection)",
			slog.String("command_id", p.CommandUUID), slog.Any("error", err))
	}
}

// runOf returns the run p carries, or nil.
func runOf(p *middleware.Pipeline) *run {
	v, _ := p.Assigned(assignRun)
	r, _ := v.(*run)
	return r
}

// commitError is the command's error when its commit failed with err.
func commitError(err error) error {
	if errors.Is(err, postgres.ErrOutcomeUnknown) {
		return fmt.Errorf("%w: %w", middleware.Reject(middleware.CodeOutcomeUnknown, "",
			"the command's commit was sent and not answered: it may have applied; repeat it with the same idempotency key"), err)
	}
	return fmt.Errorf("%w: %w", middleware.Reject(middleware.CodeNotApplied, "",
		"the command's transaction did not commit: nothing applied, try again"), err)
}

// fingerprint calls f, which is user code: its panic is an error.
func fingerprint(f idempotency.FingerprintFunc, cmd any) (fp []byte, err error) {
	if perr := middleware.Recover("idempotency fingerprint", func() { fp, err = f(cmd) }); perr != nil {
		return nil, perr
	}
	return fp, err
}
