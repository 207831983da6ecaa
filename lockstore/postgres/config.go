package postgres

import (
	"cmp"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/claimbus/claimbus/lockstore"
)

// Defaults of Config.
const (
	defaultLockConns        = 2
	defaultSchema           = "claimbus"
	defaultPollInterval     = 50 * time.Millisecond
	defaultLeaseBound       = 2 * time.Second
	defaultReconnectBackoff = time.Second
	defaultMaxBatch         = 512
	defaultConnectTimeout   = 5 * time.Second
	// defaultLocksPerConn is the default of Config.LocksPerConn.
	defaultLocksPerConn = 1000
	// defaultStatementTimeout is the default of Config.StatementTimeout.
	defaultStatementTimeout = 30 * time.Second

	// maxLockConns bounds Config.LockConns.
	maxLockConns = 64
	// maxBatchLimit bounds Config.MaxBatch.
	maxBatchLimit = 8192

	// firstPollInterval is the first wait between two tries of a key another
	// node holds; it doubles up to Config.PollInterval.
	firstPollInterval = time.Millisecond
	// firstReconnectBackoff is the first wait before reconnecting a lock
	// connection; it doubles up to Config.ReconnectBackoff.
	firstReconnectBackoff = 10 * time.Millisecond
	// maxIdentifierLen is PostgreSQL's NAMEDATALEN - 1.
	maxIdentifierLen = 63
)

// Config configures a Store. The zero value is usable: every field has a
// default (MaxHeld's is read from the server at New).
type Config struct {
	// Namespaces registers namespaces under fixed numbers 0 to 99, so that
	// their locks are easy to read in pg_locks (classid) and cannot collide with a hashed namespace. Every
	// node sharing the database must register the same map. No two names may
	// share a number. Default: none; every namespace is hashed (see LockID).
	Namespaces map[string]int32

	// LockConnString, when set, is the connection string (a postgres://
	// URL or key=value pairs, as pgx.ParseConfig takes) of every connection
	// that holds session advisory locks: the Locker's lock connections,
	// Exclusive's connections and its watcher's, and the connections that
	// bump the token epoch aside. Point it straight at the server (or at a
	// pooler in session mode) when the pool goes through a pooler in
	// transaction mode, such as PgBouncer with pool_mode = transaction:
	// lookups and Serialize (transaction-level locks) then run through the
	// pooler, and the session locks on sessions of their own. New refuses
	// lock connections that do not keep a session, with an error matching
	// ErrNoSession (see docs/postgres-production.md). Its settings are used
	// as they are (application_name aside, see Node); nothing carries over
	// from the pool's configuration. With it set, Exclusive dials a
	// connection per call instead of taking one from the pool. Default
	// empty: those connections are opened with the pool's configuration
	// (outside the pool).
	LockConnString string

	// LockConns is the number of dedicated connections the Locker holds its
	// session advisory locks on. Distinct keys are spread over them; a
	// connection holds any number of locks. Default 2, at most 64.
	LockConns int

	// Schema is the schema of the fencing-token sequence (lock_token), the
	// epoch tables and the migrations' version table
	// (claimbus_lockstore_version), which New creates or brings up to date
	// (see Migrations) unless NoAutoMigrate is set. Default "claimbus".
	Schema string

	// NoAutoMigrate, when true, stops New from creating the schema or
	// applying migrations: New checks that Schema is at the version this
	// release needs and fails with an error matching ErrSchemaOutdated when
	// it is not. Set it when the schema is migrated by a deploy step (Migrate,
	// or goose on Migrations) and the nodes' role may not create tables.
	// Default false: New applies pending migrations, under an advisory lock,
	// so nodes starting together take turns.
	NoAutoMigrate bool

	// Node names this process in Held. The lock connections carry it as
	// their application_name, which is how other nodes see it in
	// pg_stat_activity. Default: the pool's application_name, else
	// LockConnString's, else the host name.
	Node string

	// PollInterval is the longest wait between two tries of a key that
	// another node holds (Lock polls pg_try_advisory_lock, starting after
	// 1ms and doubling, with jitter, up to PollInterval), so it bounds how
	// long a freed key can stay untaken. Default 50ms.
	PollInterval time.Duration

	// LeaseBound is how long a lock is believed held without news from the
	// server: when no round trip on a lock connection has succeeded within
	// LeaseBound (counted from when the last successful one was sent), the
	// store closes the connection and closes Lost of every lock on it, and
	// their Release returns lockstore.ErrLockLost. It bounds the window in
	// which two holders may both believe they hold a key when the network
	// goes silent (see docs/lockstore.md#losing-a-lock-the-contract).
	// KeepAlive + Timeout must not exceed it, so that a healthy idle
	// connection never trips it. Default 2s.
	LeaseBound time.Duration

	// KeepAlive is how long a lock connection goes without a round trip
	// before it is pinged (and the idle time after which, and interval at
	// which, its TCP keepalive probes run). Default LeaseBound/4.
	KeepAlive time.Duration

	// Timeout bounds each round trip on a lock connection, and never
	// reaches past the lease bound. A round trip that takes longer closes
	// the connection (its locks are lost) and the store reconnects. Default
	// LeaseBound/2, or LeaseBound - KeepAlive when that is less.
	Timeout time.Duration

	// ConnectTimeout bounds each attempt to open a lock connection (dial,
	// TLS, authentication and the token epoch's bump); no lock lives on a
	// connection before it is open, so it does not count against the lease.
	// Default 5s.
	ConnectTimeout time.Duration

	// MaxHeld is the most locks the store holds at once (granted, or on
	// their way to the server); a TryLock or Lock past it fails at once
	// with an error matching lockstore.ErrCapacity, and every held lock
	// stays held. PostgreSQL keeps advisory locks in a shared lock table of
	// about max_locks_per_transaction * (max_connections +
	// max_prepared_transactions) entries for the whole server, and a lock
	// it has no room for fails with "out of shared memory". Default: a
	// quarter of that table, read from the server's settings at New, so
	// that a few nodes and the application's own locks fit beside it.
	MaxHeld int

	// LocksPerConn is how many locks one lock connection holds before new
	// grants go to another one: PostgreSQL walks a session's whole lock
	// table at every statement, so a connection holding many locks makes
	// every round trip on it slower. When every lock connection holds
	// LocksPerConn locks, the store opens one more (and closes an extra one
	// again once it holds none), up to MaxHeld / LocksPerConn + LockConns.
	// Default 1000.
	LocksPerConn int

	// StatementTimeout bounds the statements of Serialize and Exclusive
	// when the caller's ctx has no deadline: it becomes the transaction's
	// statement_timeout (unless one is already in force on the server), and
	// on the client's side Serialize's own statements (BEGIN with the lock,
	// COMMIT) give up a second after it, so that a connection whose server
	// went silent never blocks a caller for ever. Default 30s.
	StatementTimeout time.Duration

	// ReconnectBackoff is the longest wait between two attempts to replace a
	// dead lock connection (the wait starts at 10ms and doubles, with
	// jitter, so that nodes do not reconnect in step). Default 1s.
	ReconnectBackoff time.Duration

	// MaxBatch is the most lock and unlock requests one round trip on a lock
	// connection carries. Default 512, at most 8192.
	MaxBatch int

	// Logger gets one Warn record when a lock connection goes down
	// ("conn", "locks_lost", "error") and one Info record when it is back
	// ("conn", "down_for"), however many commands fail meanwhile. Default
	// slog.Default().
	Logger *slog.Logger
}

// validate reports every problem of c at once, joined with errors.Join.
func (c Config) validate() error {
	var errs []error
	byNumber := make(map[int32][]string)
	for name, n := range c.Namespaces {
		if err := (lockstore.Key{Namespace: name, ID: "x"}).Validate(); err != nil {
			errs = append(errs, fmt.Errorf("postgres: Config.Namespaces: name %.40q: %w", name, err))
		}
		if n < 0 || n > maxRegisteredNamespace {
			errs = append(errs, fmt.Errorf("postgres: Config.Namespaces: %q has number %d, want 0 to %d", name, n, maxRegisteredNamespace))
			continue
		}
		byNumber[n] = append(byNumber[n], name)
	}
	numbers := make([]int32, 0, len(byNumber))
	for n := range byNumber {
		numbers = append(numbers, n)
	}
	slices.Sort(numbers)
	for _, n := range numbers {
		if names := byNumber[n]; len(names) > 1 {
			slices.Sort(names)
			errs = append(errs, fmt.Errorf("postgres: Config.Namespaces: %q all have number %d", names, n))
		}
	}
	if c.LockConnString != "" {
		if _, err := pgx.ParseConfig(c.LockConnString); err != nil {
			errs = append(errs, fmt.Errorf("postgres: Config.LockConnString: %s", redactParseError(err)))
		}
	}
	if c.LockConns < 0 || c.LockConns > maxLockConns {
		errs = append(errs, fmt.Errorf("postgres: Config.LockConns is %d, want 0 (default %d) to %d", c.LockConns, defaultLockConns, maxLockConns))
	}
	if len(c.Schema) > maxIdentifierLen || !utf8.ValidString(c.Schema) || strings.IndexByte(c.Schema, 0) >= 0 {
		errs = append(errs, fmt.Errorf("postgres: Config.Schema %.70q is not a valid identifier (at most %d bytes of UTF-8, no NUL)", c.Schema, maxIdentifierLen))
	}
	if !utf8.ValidString(c.Node) || strings.IndexByte(c.Node, 0) >= 0 {
		errs = append(errs, errors.New("postgres: Config.Node is not valid UTF-8 without NUL"))
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{
		{"PollInterval", c.PollInterval},
		{"LeaseBound", c.LeaseBound},
		{"KeepAlive", c.KeepAlive},
		{"Timeout", c.Timeout},
		{"ConnectTimeout", c.ConnectTimeout},
		{"ReconnectBackoff", c.ReconnectBackoff},
		{"StatementTimeout", c.StatementTimeout},
	} {
		if d.v < 0 {
			errs = append(errs, fmt.Errorf("postgres: Config.%s is negative (%v)", d.name, d.v))
		}
	}
	if c.MaxHeld < 0 {
		errs = append(errs, fmt.Errorf("postgres: Config.MaxHeld is %d, want 0 (derived from the server's settings) or more", c.MaxHeld))
	}
	if c.LocksPerConn < 0 {
		errs = append(errs, fmt.Errorf("postgres: Config.LocksPerConn is %d, want 0 (default %d) or more", c.LocksPerConn, defaultLocksPerConn))
	}
	if c.LeaseBound >= 0 && c.KeepAlive >= 0 && c.Timeout >= 0 {
		d := c.withDefaults("x")
		switch {
		case d.KeepAlive >= d.LeaseBound:
			errs = append(errs, fmt.Errorf("postgres: Config.KeepAlive (%v) must be less than LeaseBound (%v): an idle connection must be pinged before its locks are given up", d.KeepAlive, d.LeaseBound))
		case d.KeepAlive+d.Timeout > d.LeaseBound:
			errs = append(errs, fmt.Errorf("postgres: Config.KeepAlive + Timeout (%v + %v) exceeds LeaseBound (%v): a healthy idle connection could lose its locks", d.KeepAlive, d.Timeout, d.LeaseBound))
		}
	}
	if c.MaxBatch < 0 || c.MaxBatch > maxBatchLimit {
		errs = append(errs, fmt.Errorf("postgres: Config.MaxBatch is %d, want 0 (default %d) to %d", c.MaxBatch, defaultMaxBatch, maxBatchLimit))
	}
	return errors.Join(errs...)
}

// withDefaults fills the zero fields of a valid c. applicationName is the
// pool's application_name.
func (c Config) withDefaults(applicationName string) Config {
	c.LockConns = cmp.Or(c.LockConns, defaultLockConns)
	c.Schema = cmp.Or(c.Schema, defaultSchema)
	c.Node = cmp.Or(c.Node, applicationName, hostname())
	c.PollInterval = cmp.Or(c.PollInterval, defaultPollInterval)
	c.LeaseBound = cmp.Or(c.LeaseBound, defaultLeaseBound)
	c.KeepAlive = cmp.Or(c.KeepAlive, c.LeaseBound/4)
	c.Timeout = cmp.Or(c.Timeout, min(c.LeaseBound/2, c.LeaseBound-c.KeepAlive))
	c.ConnectTimeout = cmp.Or(c.ConnectTimeout, defaultConnectTimeout)
	c.LocksPerConn = cmp.Or(c.LocksPerConn, defaultLocksPerConn)
	c.StatementTimeout = cmp.Or(c.StatementTimeout, defaultStatementTimeout)
	c.ReconnectBackoff = cmp.Or(c.ReconnectBackoff, defaultReconnectBackoff)
	c.MaxBatch = cmp.Or(c.MaxBatch, defaultMaxBatch)
	c.Logger = cmp.Or(c.Logger, slog.Default())
	return c
}

// redactParseError is err's message without the connection string it may
// quote (pgconn redacts passwords only as far as it can tell one), nor the
// URL a url.Error quotes.
func redactParseError(err error) string {
	var pce *pgconn.ParseConfigError
	if !errors.As(err, &pce) {
		return "cannot parse the connection string"
	}
	bare := *pce
	bare.ConnString = ""
	msg := strings.Replace(bare.Error(), "cannot parse ``: ", "cannot parse the connection string: ", 1)
	var ue *url.Error
	if errors.As(err, &ue) {
		msg = strings.ReplaceAll(msg, ue.Error(), ue.Err.Error())
	}
	return msg
}

func hostname() string {
	h, err := os.Hostname()
	if err != nil {
		return "claimbus"
	}
	return h
}
