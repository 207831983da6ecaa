package app

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/claimbus/claimbus/bus"
	"github.com/claimbus/claimbus/commands"
	"github.com/claimbus/claimbus/lockstore"
	"github.com/claimbus/claimbus/middleware"
	"github.com/claimbus/claimbus/telemetry"
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
	// as timeout (504), try again. At most half of RequestTimeout. Default
	// DefaultClaimTimeout, or a quarter of RequestTimeout when that is
	// shorter.
	ClaimTimeout time.Duration
	// RequestTimeout bounds each request of the HTTP API; past it the
	// request is answered 504, and its command, if its handler has not
	// started, is not applied (see bus.Dispatch). Default
	// DefaultRequestTimeout.
	RequestTimeout time.Duration
	// Telemetry, when set, traces and measures the node's commands: it
	// runs first, carries trace context across the transport (OnSend),
	// and observes the lock store (when it reports lockstore.Stats) and
	// the claims, named by Name. Default nil: none.
	Telemetry *telemetry.Telemetry
}

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
	return errors.Join(errs...)
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
	backstops      atomic.Int64
	staffBackstops atomic.Int64
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
	if err := Migrate(ctx, n.backend); err != nil {
		return nil, err
	}

	unique, err := uniqueness.New(uniqueness.Config{
		Locker:       n.backend.Locker(),
		ClaimTimeout: cfg.claimTimeout(),
		Rules: []uniqueness.Rule{
			uniqueness.Field("email", NamespaceStaffEmail,
				func(c *commands.CreateStaff) string { return c.Email },
				n.staffEmailTaken,
				uniqueness.Normalize(uniqueness.NormalizeEmail),
				uniqueness.AlreadyDone(n.staffCreatedBy)),
		},
		Logger: n.log,
	})
	if err != nil {
		return nil, err
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
	bcfg.Middleware = append(first, []middleware.Middleware{
		middleware.Logging(middleware.LoggingConfig{Logger: n.log, Level: slog.LevelDebug}),
		middleware.Hooks{AfterFail: n.logUnavailable},
		middleware.Validate(),
		unique,
		locks,
	}...)
	bcfg.Middleware = append(bcfg.Middleware, cfg.Middleware...)
	b, err := bus.New(bcfg)
	if err != nil {
		return nil, err
	}
	if err := errors.Join(
		bus.Handle(b, n.createStaff),
		bus.Handle(b, n.openTransfer),
		bus.Handle(b, n.approveTransfer),
		bus.Handle(b, n.cancelTransfer),
		bus.Handle(b, n.guessWord),
	); err != nil {
		return nil, errors.Join(err, b.Close())
	}
	if err := b.Start(ctx); err != nil {
		return nil, errors.Join(err, b.Close())
	}
	n.bus = b
	return n, nil
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

// Close stops the node's bus: running commands finish and answer first.
func (n *Node) Close() error { return n.bus.Close() }

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

// logUnavailable logs, as a warning with its cause, a command that failed
// because the database or the lock store could not be reached: its
// rejection crosses the bus without the cause, so this node, which saw
// it, is the one to log it.
func (n *Node) logUnavailable(ctx context.Context, p *middleware.Pipeline) {
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
