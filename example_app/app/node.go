package app

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/claimbus/claimbus/bus"
	"github.com/claimbus/claimbus/claimstore"
	claimpg "github.com/claimbus/claimbus/claimstore/postgres"
	cssqlite "github.com/claimbus/claimbus/claimstore/sqlite"
	"github.com/claimbus/claimbus/commands"
	"github.com/claimbus/claimbus/idempotency"
	"github.com/claimbus/claimbus/lockstore"
	"github.com/claimbus/claimbus/middleware"
	"github.com/claimbus/claimbus/telemetry"
	"github.com/claimbus/claimbus/txcommand"
	"github.com/claimbus/claimbus/uniqueness"
)

// Lock namespaces of the example.
const (
	// NamespaceStaffEmail is the scope of the claims on staff emails.
	NamespaceStaffEmail = "staff.email"
	// NamespaceTransfer is the namespace of the per-transfer locks.
	NamespaceTransfer = "transfer"
	// NamespaceLobby is the namespace of Serialize per lobby.
	NamespaceLobby = "lobby"
	// NamespaceNode is the namespace of the lock a node holds on its own
	// name while it runs, so that two live nodes never share one.
	NamespaceNode = "example.node"
)

// DefaultRequestTimeout bounds one request of the HTTP API when
// Config.RequestTimeout is zero.
const DefaultRequestTimeout = 20 * time.Second

// DefaultClaimTimeout bounds the wait for the claim on a staff email when
// Config.ClaimTimeout is zero, unless a quarter of the request timeout is
// shorter: the wait ends well before the request does, and the sign-up is
// answered with a timeout rejection that says to try again, instead of the
// request running out.
const DefaultClaimTimeout = 5 * time.Second

// claimTimeout is the claim wait of c.
func (c Config) claimTimeout() time.Duration {
	return cmp.Or(c.ClaimTimeout, min(DefaultClaimTimeout, c.requestTimeout()/4))
}

// requestTimeout is the request timeout of c.
func (c Config) requestTimeout() time.Duration {
	return cmp.Or(c.RequestTimeout, DefaultRequestTimeout)
}

// Config configures a Node.
type Config struct {
	// Backend is the database the handlers write to and the lock store of
	// the claims and locks. Required.
	Backend Backend
	// Name names the node in /healthz and in its log records. Default
	// "node".
	Name string
	// Bus is where the node's bus starts from: its transport (Publisher and
	// Subscriber, such as sqltransport.Transport.BusConfig sets them), node
	// id and timeouts. The node sets its Middleware. Default: the zero
	// bus.Config, a bus in process.
	Bus bus.Config
	// Middleware runs after the node's own (Logging, Validate, Uniqueness,
	// Lock), so inside the claims and locks: the demo uses it to hold a
	// command while another one arrives. Default none.
	Middleware []middleware.Middleware
	// Logger receives a record per command (at debug level, errors at
	// error level), the warnings of the backstop and the failed releases
	// of claims and locks (errors when one was lost); give it the node's
	// name with Logger.With when several nodes log to one place. Default:
	// discard.
	Logger *slog.Logger
	// ClaimTimeout bounds the wait for the claim on a staff email, behind
	// another sign-up of the same address; past it the sign-up is rejected
	// as timeout (504), try again. On SQLite it also bounds a command's
	// wait for its writes' turn at the database (503 busy past it), and a
	// sign-up's request with a tenth more (see turns.go). At most half of
	// RequestTimeout. Default DefaultClaimTimeout, or a quarter of
	// RequestTimeout when that is shorter.
	ClaimTimeout time.Duration
	// RequestTimeout bounds each request of the HTTP API; past it the
	// request is answered 504, and its command, if its handler has not
	// started, is not applied (see bus.Dispatch). Default
	// DefaultRequestTimeout.
	RequestTimeout time.Duration

	// StaffModel is how the node keeps its staff: StaffTable (the claims'
	// lookup reads the table the handler writes) or StaffEvents (the
	// handler appends events, a projection fills the read model the lookup
	// reads, after ProjectionLag). Every node of one database must use the
	// same. Default StaffTable.
	StaffModel StaffModel
	// ProjectionLag is how long after its append the projection applies a
	// StaffRegistered to the read model, in the events model: GET /staff
	// and the claims' lookup see a sign-up that much later. Default 0 (the
	// projection applies events as they come, which still lags a little).
	ProjectionLag time.Duration
	// DisableReservations turns the reservations of the email claims off in
	// the events model, where they are on by default: the lookup alone,
	// reading a read model that lags, then lets duplicates through (the
	// backstop counts them). For the demo.
	DisableReservations bool
	// SweepInterval is how often the node sweeps the reservations
	// ((*txcommand.Middleware).RunSweeper), in the events model with
	// reservations. Default DefaultSweepInterval.
	SweepInterval time.Duration
	// Claims keeps the reservations and the outcomes of the sign-ups sent
	// with an Idempotency-Key. Every node of one database must share it;
	// the events model needs the backend's durable store. Default: the
	// backend's durable store in its database (claimstore/postgres,
	// claimstore/sqlite).
	Claims claimstore.Store
	// IdempotencyRetention is how long the answer of a sign-up sent with an
	// Idempotency-Key is kept: a repeat within it gets that answer. Default
	// DefaultIdempotencyRetention.
	IdempotencyRetention time.Duration
	// Telemetry, when set, traces and measures the node's commands: it
	// runs first, carries trace context across the transport (OnSend),
	// and observes the lock store (when it reports lockstore.Stats) and
	// the claims, named by Name. Default nil: none.
	Telemetry *telemetry.Telemetry
}

// Defaults of the Config fields of the claims.
const (
	// DefaultSweepInterval is the SweepInterval of a Config that sets none.
	DefaultSweepInterval = 10 * time.Second
	// DefaultIdempotencyRetention is the IdempotencyRetention of a Config
	// that sets none.
	DefaultIdempotencyRetention = 24 * time.Hour
)

// staffModel is the staff model of c.
func (c Config) staffModel() StaffModel { return cmp.Or(c.StaffModel, StaffTable) }

// reserves reports whether the email claims reserve.
func (c Config) reserves() bool { return c.staffModel() == StaffEvents && !c.DisableReservations }

// Validate reports every problem of the configuration at once.
func (c Config) Validate() error {
	var errs []error
	if c.Backend == nil {
		errs = append(errs, ErrNilBackend)
	}
	if len(c.Bus.Middleware) > 0 {
		errs = append(errs, errors.New("app: Config.Bus.Middleware is set: the node sets its bus's middleware (use Config.Middleware)"))
	}
	if c.ClaimTimeout < 0 {
		errs = append(errs, fmt.Errorf("app: Config.ClaimTimeout is negative (%v)", c.ClaimTimeout))
	}
	if c.RequestTimeout < 0 {
		errs = append(errs, fmt.Errorf("app: Config.RequestTimeout is negative (%v)", c.RequestTimeout))
	}
	if c.ClaimTimeout > 0 && c.RequestTimeout >= 0 && c.ClaimTimeout > c.requestTimeout()/2 {
		errs = append(errs, fmt.Errorf("app: Config.ClaimTimeout (%v) is over half the request timeout (%v): a sign-up waiting for its claim would run out of time before it is answered",
			c.ClaimTimeout, c.requestTimeout()))
	}
	errs = append(errs, c.validateModel()...)
	return errors.Join(errs...)
}

// validateModel reports the problems of the staff model's fields.
func (c Config) validateModel() []error {
	var errs []error
	switch c.staffModel() {
	case StaffTable:
		if c.ProjectionLag != 0 || c.DisableReservations {
			errs = append(errs, errors.New("app: Config.ProjectionLag and DisableReservations are for the events staff model (StaffModel StaffEvents)"))
		}
	case StaffEvents:
	default:
		errs = append(errs, fmt.Errorf("app: Config.StaffModel %q: want %q or %q", c.StaffModel, StaffTable, StaffEvents))
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"ProjectionLag", c.ProjectionLag}, {"SweepInterval", c.SweepInterval}, {"IdempotencyRetention", c.IdempotencyRetention}} {
		if d.v < 0 {
			errs = append(errs, fmt.Errorf("app: Config.%s is negative (%v)", d.name, d.v))
		}
	}
	return errs
}

// Node is one instance of the example service: a bus whose handlers write
// to the backend's database, behind Validate, Uniqueness (one staff per
// email) and Lock (one command per transfer at a time) middleware.
type Node struct {
	backend        Backend
	name           string
	bus            *bus.Bus
	log            *slog.Logger
	requestTimeout time.Duration
	// signUpTimeout bounds a POST /staff: requestTimeout, or on SQLite
	// less (see boundTurns).
	signUpTimeout  time.Duration
	backstops      atomic.Int64
	staffBackstops atomic.Int64
	model          StaffModel
	claims         claimstore.Store
	unique         *uniqueness.Middleware
	// txMode is the events model's transactional middleware, nil in the
	// table model; sweeper sweeps the email reservations.
	txMode  *txcommand.Middleware
	sweeper interface {
		Sweep(ctx context.Context) (uniqueness.SweepResult, error)
		RunSweeper(ctx context.Context, interval time.Duration) error
	}
	// projection is the events model's projection, nil in the table model.
	projection *projection
	// stop ends the node's background goroutines (the sweeper, the
	// purger); done is closed when they all returned.
	stop context.CancelFunc
	done chan struct{}
	// unavailable is the reason of SetUnavailable, nil while available.
	unavailable availability
}

// New creates the schema when it is missing, builds the node's bus and
// starts it. Close the node when done; it does not close the backend's
// store or database.
func New(ctx context.Context, cfg Config) (*Node, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	n := &Node{
		backend:        cfg.Backend,
		name:           cmp.Or(cfg.Name, "node"),
		log:            cmp.Or(cfg.Logger, slog.New(slog.DiscardHandler)),
		requestTimeout: cfg.requestTimeout(),
	}
	hooks := middleware.Hooks{OnAfterFailure: n.logTrouble}
	n.signUpTimeout = n.requestTimeout
	if b, ok := n.backend.(sqliteBackend); ok {
		hooks.OnBeforeDispatch = n.boundTurns(cfg.claimTimeout(), &b)
		n.backend = b
	}
	if err := Migrate(ctx, n.backend); err != nil {
		return nil, err
	}

	n.model = cfg.staffModel()
	n.claims = cfg.Claims
	if n.claims == nil {
		var err error
		if n.claims, err = n.backend.claims(ctx); err != nil {
			return nil, fmt.Errorf("app: claim store: %w", err)
		}
	}
	staffHandler := n.createStaff
	if n.model == StaffEvents {
		staffHandler = n.registerStaff
	}
	unique, err := uniqueness.New(uniqueness.Config{
		Locker:       n.backend.Locker(),
		ClaimTimeout: cfg.claimTimeout(),
		Rules:        []uniqueness.Rule{n.staffEmailRule()},
		Logger:       n.log,
	})
	if err != nil {
		return nil, err
	}
	n.unique = unique
	idem, err := idempotency.New(idempotency.Config{
		Locker:      n.backend.Locker(),
		Store:       n.claims,
		Retention:   cmp.Or(cfg.IdempotencyRetention, DefaultIdempotencyRetention),
		Key:         idempotencyKey,
		LockTimeout: cfg.claimTimeout(),
		Logger:      n.log,
	})
	if err != nil {
		return nil, err
	}
	// The events model runs CreateStaff in one transaction (txcommand):
	// the event, the email's reservation and the Idempotency-Key's outcome
	// commit together. In the table model the claims are session locks
	// beside the handler's writes.
	claiming := []middleware.Middleware{
		idem, // before the claims: a repeat is answered without claiming
		unique,
	}
	n.sweeper = unique
	if n.txMode, err = n.txCommand(cfg); err != nil {
		return nil, err
	} else if n.txMode != nil {
		claiming, n.sweeper = []middleware.Middleware{n.txMode}, n.txMode
	}
	locks, err := middleware.Lock(middleware.LockConfig{
		Locker: n.backend.Locker(),
		Keys:   transferKeys,
		Logger: n.log,
	})
	if err != nil {
		return nil, err
	}
	bcfg := cfg.Bus
	var first []middleware.Middleware
	if t := cfg.Telemetry; t != nil {
		first, bcfg.OnSend = []middleware.Middleware{t}, t.OnSend
		if err := observeStores(t, n.name, n.backend.Locker(), unique); err != nil {
			return nil, err
		}
	}
	bcfg.Middleware = append(first, []middleware.Middleware{ //nolint:gocritic // appendAssign: first is this chain's fresh head, never used again
		middleware.Logging(middleware.LoggingConfig{Logger: n.log, Level: slog.LevelDebug}),
		hooks,
		middleware.Validate(),
	}...)
	bcfg.Middleware = append(bcfg.Middleware, claiming...)
	bcfg.Middleware = append(bcfg.Middleware, locks)
	bcfg.Middleware = append(bcfg.Middleware, cfg.Middleware...)
	// The Logging middleware above logs every outcome to the node's logger
	// already (rejections at Debug, failures at Error).
	bcfg.FailureLog = middleware.FailureLog{Off: true}
	b, err := bus.New(bcfg)
	if err != nil {
		return nil, err
	}
	if err := errors.Join(
		bus.Handle(b, staffHandler),
		bus.Handle(b, n.openTransfer),
		bus.Handle(b, n.approveTransfer),
		bus.Handle(b, n.cancelTransfer),
		bus.Handle(b, n.guessWord),
	); err != nil {
		return nil, errors.Join(err, b.Close())
	}
	if n.model == StaffEvents {
		if n.projection, err = startProjection(ctx, n, cfg.ProjectionLag); err != nil {
			return nil, errors.Join(err, b.Close())
		}
		if err := n.catchUp(ctx); err != nil {
			return nil, errors.Join(err, b.Close(), n.closeProjection())
		}
	}
	if err := b.Start(ctx); err != nil {
		return nil, errors.Join(err, b.Close(), n.closeProjection())
	}
	n.bus = b
	n.startBackground(cfg, idem)
	return n, nil
}

// startBackground starts the node's own goroutines: the sweeper of the
// reservations (when the claims reserve) and the purger of expired
// idempotency outcomes. Close stops them.
func (n *Node) startBackground(cfg Config, idem *idempotency.Middleware) {
	ctx, stop := context.WithCancel(context.Background())
	n.stop, n.done = stop, make(chan struct{})
	var wg sync.WaitGroup
	if cfg.reserves() {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = n.sweeper.RunSweeper(ctx, cmp.Or(cfg.SweepInterval, DefaultSweepInterval)) // nil once ctx ends
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		_ = idem.RunPurger(ctx, time.Hour) // ctx's error once it ends
	}()
	go func() { wg.Wait(); close(n.done) }()
}

// projectionDrainTimeout bounds how long Close waits for the projection to
// apply the events published before it.
const projectionDrainTimeout = 10 * time.Second

// Close stops the node's bus (running commands finish and answer first),
// waits for the confirmations of their reservations, lets the projection
// apply the events published so far, and stops the projection, the
// sweeper and the purger.
func (n *Node) Close() error {
	err := n.bus.Close()
	fctx, cancel := context.WithTimeout(context.Background(), middleware.DefaultReleaseTimeout)
	err = errors.Join(err, n.unique.Flush(fctx))
	cancel()
	err = errors.Join(err, n.closeProjection())
	n.stop()
	<-n.done
	return err
}

// closeProjection drains and stops the projection, if any.
func (n *Node) closeProjection() error {
	if n.projection == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), n.projection.lag+projectionDrainTimeout)
	defer cancel()
	return errors.Join(n.projection.wait(ctx), n.projection.close())
}

// StaffModel returns the node's staff model.
func (n *Node) StaffModel() StaffModel { return n.model }

// Claims returns the store of the node's reservations and idempotency
// outcomes.
func (n *Node) Claims() claimstore.Store { return n.claims }

// Sweep sweeps the reservations of the email claims once (see
// (*uniqueness.Middleware).Sweep); the node also does on its own, every
// Config.SweepInterval.
func (n *Node) Sweep(ctx context.Context) (uniqueness.SweepResult, error) {
	return n.sweeper.Sweep(ctx)
}

// txCommand returns the transactional middleware of the events model,
// and nil in the table model.
func (n *Node) txCommand(cfg Config) (*txcommand.Middleware, error) {
	if n.model != StaffEvents {
		return nil, nil
	}
	var backend txcommand.Backend
	if b, ok := n.backend.(pgBackend); ok {
		if claims, ok := n.claims.(*claimpg.Store); ok {
			backend = txcommand.Postgres(b.store, claims)
		}
	} else if b, ok := n.backend.(sqliteBackend); ok {
		if claims, ok := n.claims.(*cssqlite.Store); ok {
			backend = txcommand.SQLite(b.store, claims)
		}
	}
	if backend == nil {
		return nil, fmt.Errorf("app: the events model needs the backend's durable claim store (Config.Claims unset), not a %T", n.claims)
	}
	opts := []txcommand.RuleOption{txcommand.Normalize(uniqueness.NormalizeEmail)}
	if cfg.reserves() {
		opts = append(opts, txcommand.Reserve())
	}
	return txcommand.New(txcommand.Config{
		Backend: backend,
		Rules: []txcommand.Rule{txcommand.Unique(uniqueness.Names{Field: "email", Scope: NamespaceStaffEmail},
			func(c *commands.CreateStaff) string { return c.Email }, `SELECT 1 FROM staff WHERE email = $1`, opts...)},
		Idempotency:  &txcommand.Idempotency{Key: idempotencyKey, Retention: cmp.Or(cfg.IdempotencyRetention, DefaultIdempotencyRetention)},
		ClaimTimeout: cfg.claimTimeout(),
		Logger:       n.log,
	})
}

// observeStores has t observe the node's lock store, when it reports
// lockstore.Stats, and its claims, both named name.
func observeStores(t *telemetry.Telemetry, name string, l lockstore.Locker, claims *uniqueness.Middleware) error {
	if r, ok := l.(lockstore.StatsReporter); ok {
		if err := t.ObserveLocker(name, r); err != nil {
			return err
		}
	}
	return t.ObserveClaims(name, claims)
}

// Name returns the node's name.
func (n *Node) Name() string { return n.name }

// Backend returns the node's backend.
func (n *Node) Backend() Backend { return n.backend }

// Backstops returns how many times a unique index refused a row that the
// claims should have kept out. It stays 0 while the claims work: a
// non-zero count is a bug worth a look.
func (n *Node) Backstops() int64 { return n.backstops.Load() }

// BackstopViolations returns how many times the unique index of the staff
// table refused a member whose address the claims let through: the
// number /healthz reports as backstop_violations. It must stay 0; each
// one is also logged, and counted in Backstops.
func (n *Node) BackstopViolations() int64 { return n.staffBackstops.Load() }

// logTrouble logs what the Logging middleware, at Debug for rejections,
// would hide: a command that failed because the database or the lock
// store could not be reached, or was busy, as a warning with its cause
// (its rejection crosses the bus without it, so this node, which saw it,
// is the one to log it). A command that timed out (a claim's wait) is
// logged by the node that answers its request 504 (answerError).
func (n *Node) logTrouble(ctx context.Context, p *middleware.Pipeline) {
	if err := p.Err(); errors.Is(err, middleware.ErrUnavailable) {
		n.log.WarnContext(ctx, "command failed: unavailable", "command", p.CommandName, "command_id", p.CommandUUID, "error", err)
	}
}

// backstop records that a unique index fired.
func (n *Node) backstop(ctx context.Context, what string, err error) {
	n.backstops.Add(1)
	n.log.WarnContext(ctx, "a unique index refused a row the claims should have kept out", "what", what, "error", err)
}

// CreateStaff sends c through the bus and returns the member created, or a
// rejection: already_taken naming "email" or "staff_id", invalid naming
// the field. A sign-up sent again with the same staff_id and address (a
// replay, or a redelivery of one whose first run committed) returns the
// member as stored, or, when its name differs, a conflicting_replay
// rejection (ErrConflictingReplay) that changes nothing.
func (n *Node) CreateStaff(ctx context.Context, c *commands.CreateStaff) (Staff, error) {
	s, _, err := n.signUp(ctx, c)
	return s, err
}

// OpenTransfer sends c through the bus and returns the open transfer.
func (n *Node) OpenTransfer(ctx context.Context, c *commands.OpenTransfer) (Transfer, error) {
	return bus.Dispatch[Transfer](ctx, n.bus, c)
}

// ApproveTransfer sends c through the bus and returns the approved
// transfer; a transfer that another command holds is rejected as locked.
func (n *Node) ApproveTransfer(ctx context.Context, c *commands.ApproveTransfer) (Transfer, error) {
	return bus.Dispatch[Transfer](ctx, n.bus, c)
}

// CancelTransfer sends c through the bus and returns the cancelled
// transfer; a transfer that another command holds is rejected as locked.
func (n *Node) CancelTransfer(ctx context.Context, c *commands.CancelTransfer) (Transfer, error) {
	return bus.Dispatch[Transfer](ctx, n.bus, c)
}

// GuessWord sends c through the bus and returns the outcome of the guess.
func (n *Node) GuessWord(ctx context.Context, c *commands.GuessWord) (Guess, error) {
	return bus.Dispatch[Guess](ctx, n.bus, c)
}

// commandID returns the UUID of the command whose handler ctx belongs to.
func commandID(ctx context.Context) string {
	if p, ok := middleware.PipelineFromContext(ctx); ok {
		return p.CommandUUID
	}
	return ""
}

// idempotencyKey is the idempotency middleware's key of a command: the
// IdempotencyKey of a CreateStaff (from the Idempotency-Key header), none
// for the other commands.
func idempotencyKey(p *middleware.Pipeline) string {
	if c, ok := p.Command.(*commands.CreateStaff); ok {
		return c.IdempotencyKey
	}
	return ""
}
