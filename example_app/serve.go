package main

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/claimbus/claimbus/bus"
	"github.com/claimbus/claimbus/bus/natstransport"
	"github.com/claimbus/claimbus/bus/sqltransport"
	"github.com/claimbus/claimbus/commands"
	"github.com/claimbus/claimbus/example_app/app"
	"github.com/claimbus/claimbus/lockstore"
	"github.com/claimbus/claimbus/lockstore/postgres"
	"github.com/claimbus/claimbus/lockstore/sqlite"
	"github.com/claimbus/claimbus/middleware"
	"github.com/claimbus/claimbus/uniqueness"
)

// Timeouts of the HTTP server and of shutdown.
const (
	readHeaderTimeout = 5 * time.Second
	readTimeout       = 10 * time.Second
	// writeTimeout is above app.DefaultRequestTimeout, so that a command
	// that times out is still answered.
	writeTimeout    = app.DefaultRequestTimeout + 10*time.Second
	idleTimeout     = 60 * time.Second
	shutdownTimeout = 15 * time.Second
	// busCloseTimeout is how long the bus lets running handlers finish.
	busCloseTimeout = 10 * time.Second
	startTimeout    = 30 * time.Second
)

// serveFlags are the flags of serve.
type serveFlags struct {
	addr, node, db, transport, logLevel, holdEmail string
	// data is the SQLite file of the embedded node (no -db); dataSet says
	// whether -data was given.
	data    string
	dataSet bool
	// natsURL is the NATS server(s) of -transport nats.
	natsURL string
	// staffModel, projectionLag and reservations are the staff model's
	// flags; eventsOnly names the events model's flags given.
	staffModel    string
	projectionLag time.Duration
	reservations  bool
	eventsOnly    []string
	// trace is where spans go: traceOff or traceStdout.
	trace string
}

// appConfig returns the node configuration of the staff model's flags.
func (f serveFlags) appConfig(cfg app.Config) app.Config {
	cfg.StaffModel = app.StaffModel(f.staffModel)
	if cfg.StaffModel == app.StaffEvents {
		cfg.ProjectionLag, cfg.DisableReservations = f.projectionLag, !f.reservations
	}
	return cfg
}

var nodeName = regexp.MustCompile(`^[A-Za-z0-9._:-]{1,48}$`)

// validate reports every problem of the flags at once.
func (f serveFlags) validate() error {
	var errs []error
	if host, port, err := net.SplitHostPort(f.addr); err != nil {
		errs = append(errs, fmt.Errorf("-addr %q is not host:port: %w", f.addr, err))
	} else if p, err := strconv.Atoi(port); err != nil || p < 0 || p > 65535 {
		errs = append(errs, fmt.Errorf("-addr %q: the port is not a number from 0 to 65535", f.addr))
	} else if host == "" {
		errs = append(errs, fmt.Errorf("-addr %q: give the host to listen on, such as 127.0.0.1:%s (or 0.0.0.0:%s for every interface)", f.addr, port, port))
	}
	if f.db == "" {
		// The embedded node: one process on an SQLite file.
		if f.data == "" {
			errs = append(errs, errors.New("-data is empty: give the SQLite file of the embedded node, such as claimbus.db"))
		}
		if f.transport != "inprocess" {
			errs = append(errs, fmt.Errorf("-transport %s needs -db: without it the node is embedded on SQLite, with -transport inprocess only", f.transport))
		}
	} else if f.dataSet {
		errs = append(errs, errors.New("-data is for the embedded node on SQLite: drop it, or drop -db (and DATABASE_URL)"))
	}
	if !nodeName.MatchString(f.node) {
		errs = append(errs, fmt.Errorf("-node %q: give each node a name of 1 to 48 letters, digits or . _ : -, unique among the nodes of the database", f.node))
	}
	if f.db != "" && !strings.HasPrefix(f.db, "postgres://") && !strings.HasPrefix(f.db, "postgresql://") {
		errs = append(errs, errors.New("-db must be a postgres:// or postgresql:// URL"))
	} else if _, err := pgxpool.ParseConfig(f.db); f.db != "" && err != nil {
		errs = append(errs, fmt.Errorf("-db: %w", err))
	}
	if f.transport != "inprocess" && f.transport != "postgres" && f.transport != "nats" {
		errs = append(errs, fmt.Errorf("-transport %q: want inprocess, postgres or nats", f.transport))
	}
	if f.trace != "" && f.trace != traceOff && f.trace != traceStdout {
		errs = append(errs, fmt.Errorf("-trace %q: want off or stdout", f.trace))
	}
	errs = append(errs, f.validateNATS()...)
	errs = append(errs, f.validateModel()...)
	var level slog.Level
	if err := level.UnmarshalText([]byte(f.logLevel)); err != nil {
		errs = append(errs, fmt.Errorf("-log-level %q: want debug, info, warn or error", f.logLevel))
	}
	if f.holdEmail != "" {
		if err := commands.CheckEmail("email", f.holdEmail); err != nil {
			errs = append(errs, fmt.Errorf("-test-hold-email: %w", err))
		}
	}
	return errors.Join(errs...)
}

// modelNote describes the events staff model for the start-up line, "" for
// the table model.
func (f serveFlags) modelNote() string {
	if app.StaffModel(f.staffModel) != app.StaffEvents {
		return ""
	}
	return fmt.Sprintf(", staff model events (projection lag %v, reservations %v)", f.projectionLag, f.reservations)
}

// validateModel reports the problems of the staff model's flags: an
// unknown model, the events model's flags without it, a negative lag.
func (f serveFlags) validateModel() []error {
	var errs []error
	switch app.StaffModel(cmp.Or(f.staffModel, string(app.StaffTable))) {
	case app.StaffTable:
		if len(f.eventsOnly) > 0 {
			errs = append(errs, fmt.Errorf("-%s is for -staff-model events: add it, or drop the flag", strings.Join(f.eventsOnly, ", -")))
		}
		return errs
	case app.StaffEvents:
	default:
		return []error{fmt.Errorf("-staff-model %q: want table or events", f.staffModel)}
	}
	if f.projectionLag < 0 {
		errs = append(errs, fmt.Errorf("-projection-lag %v is negative", f.projectionLag))
	}
	return errs
}

// validateNATS reports the problems of -nats-url: required by -transport
// nats, refused without it, nats:// (or tls://, ws://, wss://) URLs with a
// host, separated by commas.
func (f serveFlags) validateNATS() []error {
	if f.transport != "nats" {
		if f.natsURL != "" {
			return []error{fmt.Errorf("-nats-url is set but -transport is %q: add -transport nats, or drop -nats-url", f.transport)}
		}
		return nil
	}
	if f.natsURL == "" {
		return []error{errors.New("-transport nats needs -nats-url: the NATS server(s), such as nats://127.0.0.1:4222")}
	}
	var errs []error
	for _, s := range strings.Split(f.natsURL, ",") {
		u, err := url.Parse(strings.TrimSpace(s))
		switch {
		case err != nil:
			errs = append(errs, fmt.Errorf("-nats-url: %w", err))
		case u.Scheme != "nats" && u.Scheme != "tls" && u.Scheme != "ws" && u.Scheme != "wss":
			errs = append(errs, fmt.Errorf("-nats-url %q: want a nats://, tls://, ws:// or wss:// URL", u.Redacted()))
		case u.Host == "":
			errs = append(errs, fmt.Errorf("-nats-url %q: no host", u.Redacted()))
		}
	}
	return errs
}

// serve runs the HTTP API until ctx ends, and returns the exit code.
func serve(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("example_app serve", flag.ContinueOnError)
	var f serveFlags
	fs.StringVar(&f.addr, "addr", "127.0.0.1:8080", "`host:port` to listen on; port 0 picks a free port (the address is printed)")
	fs.StringVar(&f.node, "node", "", "`name` of this node, unique among the nodes of the database (required with -db; default \"local\" on SQLite)")
	fs.StringVar(&f.db, "db", os.Getenv("DATABASE_URL"),
		"PostgreSQL `URL` of the database the nodes share (default $DATABASE_URL); without it, one embedded node on the SQLite file -data")
	fs.StringVar(&f.data, "data", defaultData(),
		"without -db: the SQLite `file` of the embedded node, created when missing (and its directory, for the default); one process at a time")
	fs.StringVar(&f.transport, "transport", "inprocess",
		"how commands reach their handlers: inprocess (the node that receives a request handles it), postgres (one queue per command in the database, shared by every node) or nats (one JetStream queue per command, with -nats-url)")
	fs.StringVar(&f.staffModel, "staff-model", string(app.StaffTable),
		"`model` of the staff: table (CreateStaff inserts the member; the claims read that table) or events (CreateStaff appends a StaffRegistered event; a projection fills the read model that the claims and GET /staff read, -projection-lag later)")
	fs.DurationVar(&f.projectionLag, "projection-lag", 0, "with -staff-model events: how long after a sign-up the projection applies it to the read model")
	fs.BoolVar(&f.reservations, "reservations", true, "with -staff-model events: reserve each email until the read model shows it (false lets duplicates through while the read model lags; the backstop counts them)")
	fs.StringVar(&f.logLevel, "log-level", "info", "debug logs every command; info, warn, error")
	// The fault tests' flag is parsed like the others, and left out of the
	// help: it is not for people.
	fs.Usage = usageWithout(fs, "test-hold-email",
		"Runs the HTTP API: by default one node on the embedded SQLite file -data, one process per file;\n"+
			"with -db (or $DATABASE_URL), a node on PostgreSQL, where several nodes may share the database.")
	fs.StringVar(&f.natsURL, "nats-url", "",
		"with -transport nats: the NATS `URL`(s) (JetStream on), such as nats://127.0.0.1:4222, comma-separated for a cluster")
	fs.StringVar(&f.trace, "trace", traceOff, "where the spans of the commands go: off, or stdout (metrics are on GET /metrics either way)")
	fs.StringVar(&f.holdEmail, "test-hold-email", "",
		"for fault tests only: a CreateStaff of this `email` waits, holding its claim, until the node stops")
	if ok, code := parseFlags(fs, args, stderr); !ok {
		return code
	}
	fs.Visit(func(fl *flag.Flag) {
		f.dataSet = f.dataSet || fl.Name == "data"
		switch fl.Name {
		case "projection-lag", "reservations":
			f.eventsOnly = append(f.eventsOnly, fl.Name)
		}
	})
	if f.db == "" && f.node == "" {
		f.node = "local"
	}
	err := f.validate()
	if fs.NArg() > 0 {
		err = errors.Join(err, fmt.Errorf("unexpected arguments %q", fs.Args()))
	}
	if err != nil {
		fmt.Fprintf(stderr, "example_app serve: bad flags:\n%v\n", err)
		return 2
	}
	var level slog.Level
	_ = level.UnmarshalText([]byte(f.logLevel))
	logger := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level})).With("node", f.node)
	if err := runServer(ctx, f, logger, stdout); err != nil {
		// One plain line first, the error's own words after the command's
		// name; then the same as a log record, for whoever collects them.
		fmt.Fprintf(stderr, "example_app serve: %s\n", oneLine(err))
		logger.Error("serve failed", "error", err)
		return 1
	}
	fmt.Fprintf(stdout, "example_app: node %s stopped\n", f.node)
	return 0
}

// oneLine is err's message on one line: the driver's multi-line errors
// (one line per address tried) joined with "; ".
func oneLine(err error) string {
	return strings.NewReplacer(":\n\t", ": ", "\n\t", "; ", "\n", "; ").Replace(err.Error())
}

// usageWithout returns a usage function for fs that prints about, then
// the defaults of the flags registered so far, as fs.PrintDefaults does,
// but not the flag hidden, whether or not it is registered yet.
func usageWithout(fs *flag.FlagSet, hidden, about string) func() {
	return func() {
		shown := flag.NewFlagSet(fs.Name(), flag.ContinueOnError)
		shown.SetOutput(fs.Output())
		fs.VisitAll(func(f *flag.Flag) {
			if f.Name != hidden {
				shown.Var(f.Value, f.Name, f.Usage)
				shown.Lookup(f.Name).DefValue = f.DefValue
			}
		})
		fmt.Fprintf(fs.Output(), "usage: %s [flags]\n\n%s\n\n", fs.Name(), about)
		shown.PrintDefaults()
	}
}

// runServer runs one node until ctx ends, then shuts it down gracefully:
// the HTTP server stops taking requests and finishes those it has, then the
// bus, the transport, the lock store and the pools close in turn.
func runServer(ctx context.Context, f serveFlags, logger *slog.Logger, stdout io.Writer) (err error) {
	startCtx, cancel := context.WithTimeout(ctx, startTimeout)
	defer cancel()
	closers := []func() error{}
	defer func() {
		for i := len(closers) - 1; i >= 0; i-- {
			err = errors.Join(err, closers[i]())
		}
	}()

	// The address is taken first: a start that fails on it creates
	// nothing (no SQLite file) and connects to nothing.
	ln, err := net.Listen("tcp", f.addr)
	if errors.Is(err, syscall.EADDRINUSE) {
		return fmt.Errorf("-addr %s: the address is in use: stop what listens there, or give another -addr (port 0 picks a free one)", f.addr)
	}
	if err != nil {
		return fmt.Errorf("-addr %s: %w", f.addr, err)
	}
	closers = append(closers, func() error {
		if err := ln.Close(); err != nil && !errors.Is(err, net.ErrClosed) { // the server closes it
			return err
		}
		return nil
	})
	obs, err := newObservability(f.node, f.trace, stdout)
	if err != nil {
		return err
	}
	closers = append(closers, obs.close)
	if f.db == "" {
		return runEmbedded(ctx, startCtx, f, ln, obs, logger, stdout, &closers)
	}
	pool, err := openPool(startCtx, f.db, f.node, 20)
	if err != nil {
		return err
	}
	closers = append(closers, func() error { pool.Close(); return nil })
	store, err := postgres.New(startCtx, pool, postgres.Config{Namespaces: app.Namespaces(), Node: f.node})
	if err != nil {
		return fmt.Errorf("lock store: %w", err)
	}
	closers = append(closers, store.Close)

	// Two live nodes with one name would share a reply queue (with
	// -transport postgres) and be told apart by nobody: the node holds its
	// name as a lock while it runs, freed when its session ends, and
	// retaken when it is lost (see nameHolder).
	key := lockstore.Key{Namespace: app.NamespaceNode, ID: f.node}
	name, err := store.TryLock(startCtx, key)
	if errors.Is(err, lockstore.ErrLocked) {
		return errNameTaken(f.node)
	}
	if err != nil {
		return fmt.Errorf("lock the node name: %w", err)
	}
	names := &nameHolder{store: store, key: key, logger: logger, lock: name}
	closers = append(closers, names.release)

	wmLogger := watermill.NewSlogLogger(logger.With("component", "bus"))
	bcfg := bus.Config{CloseTimeout: busCloseTimeout, Logger: wmLogger}
	if f.transport == "postgres" {
		// The transport gets a pool of its own: each command subscription
		// holds a connection while its handler runs, and the handlers
		// write through the node's pool.
		tpool, err := openPool(startCtx, f.db, f.node+"-bus", 16)
		if err != nil {
			return err
		}
		closers = append(closers, func() error { tpool.Close(); return nil })
		tr, err := sqltransport.New(startCtx, tpool, sqltransport.Config{NodeID: f.node, Logger: wmLogger})
		if err != nil {
			return fmt.Errorf("transport: %w", err)
		}
		closers = append(closers, tr.Close)
		bcfg = tr.BusConfig(bcfg)
	}
	if f.transport == "nats" {
		// Commands and replies go through NATS JetStream; claims and locks
		// stay in PostgreSQL. While NATS is down, commands fail with
		// middleware.ErrUnavailable, which the API answers 503.
		tr, err := natstransport.New(startCtx, f.natsURL, natstransport.Config{NodeID: f.node, Logger: wmLogger})
		if err != nil {
			return fmt.Errorf("transport: %w", err)
		}
		closers = append(closers, tr.Close)
		bcfg = tr.BusConfig(bcfg)
	}

	stopping := make(chan struct{})
	var extra []middleware.Middleware
	if f.holdEmail != "" {
		extra = append(extra, holdEmail(uniqueness.NormalizeEmail(f.holdEmail), stopping, logger))
	}
	node, err := app.New(startCtx, f.appConfig(app.Config{
		Backend:    app.PostgresBackend(store),
		Name:       f.node,
		Bus:        bcfg,
		Middleware: extra,
		Logger:     logger,
		Telemetry:  obs.tel,
	}))
	if err != nil {
		return fmt.Errorf("node: %w", err)
	}
	closers = append(closers, node.Close)

	// The watch of the name stops before the name is let go.
	names.node = node
	wctx, stopWatch := context.WithCancel(ctx)
	watched, watchDone := make(chan error, 1), make(chan struct{})
	go func() { defer close(watchDone); watched <- names.watch(wctx) }()
	closers = append(closers, func() error { stopWatch(); <-watchDone; return nil })
	return serveOn(ctx, ln, f, obs.handler(node.Handler()), logger, stdout, stopping, watched, "postgres, transport "+f.transport+f.modelNote())
}

// runEmbedded runs the embedded node on the SQLite file f.data: one
// process per file (the store's file lock), the transport in process. A
// file it created is removed if the node does not start.
func runEmbedded(ctx, startCtx context.Context, f serveFlags, ln net.Listener, obs *observability, logger *slog.Logger, stdout io.Writer, closers *[]func() error) error {
	data, err := openDataFile(f.data, !f.dataSet)
	if err != nil {
		return err
	}
	started := false
	*closers = append(*closers, func() error {
		if !started {
			data.remove()
		}
		return nil
	})
	db, err := sql.Open("sqlite", sqlite.DSN(f.data, 0))
	if err != nil {
		return fmt.Errorf("open %s: %w", f.data, err)
	}
	*closers = append(*closers, db.Close)
	store, err := sqlite.New(startCtx, db, sqlite.Config{})
	if errors.Is(err, sqlite.ErrFileLocked) {
		return fmt.Errorf("another example_app is serving %s: one process per -data file (stop it, or give another -data)", f.data)
	}
	if err != nil {
		return fmt.Errorf("open %s: %w", f.data, err)
	}
	*closers = append(*closers, store.Close)
	stopping := make(chan struct{})
	var extra []middleware.Middleware
	if f.holdEmail != "" {
		extra = append(extra, holdEmail(uniqueness.NormalizeEmail(f.holdEmail), stopping, logger))
	}
	node, err := app.New(startCtx, f.appConfig(app.Config{
		Backend:    app.SQLiteBackend(store),
		Name:       f.node,
		Bus:        bus.Config{CloseTimeout: busCloseTimeout, Logger: watermill.NewSlogLogger(logger.With("component", "bus"))},
		Middleware: extra,
		Logger:     logger,
		Telemetry:  obs.tel,
	}))
	if err != nil {
		return fmt.Errorf("node: %w", err)
	}
	*closers = append(*closers, node.Close)
	started = true
	return serveOn(ctx, ln, f, obs.handler(node.Handler()), logger, stdout, stopping, nil, "sqlite "+f.data+", transport inprocess"+f.modelNote())
}

// serveOn serves handler (the node's API) on ln, the listener of f.addr,
// until ctx ends or fatal sends (the node cannot go on: its error, or
// nil), then shuts the server down gracefully; stopping closes when the
// shutdown starts.
func serveOn(ctx context.Context, ln net.Listener, f serveFlags, handler http.Handler, logger *slog.Logger, stdout io.Writer,
	stopping chan struct{}, fatal <-chan error, what string) (err error) {
	srv := &http.Server{
		Handler:           handler,
		ReadHeaderTimeout: readHeaderTimeout,
		ReadTimeout:       readTimeout,
		WriteTimeout:      writeTimeout,
		IdleTimeout:       idleTimeout,
		ErrorLog:          slog.NewLogLogger(logger.Handler(), slog.LevelWarn),
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	fmt.Fprintf(stdout, "example_app: node %s listening on http://%s (%s)\n", f.node, ln.Addr(), what)

	var failed error
	select {
	case err := <-served:
		return fmt.Errorf("http server: %w", err)
	case failed = <-fatal:
		if failed == nil { // the watch ended with ctx
			<-ctx.Done()
		}
	case <-ctx.Done():
	}
	logger.Info("shutting down")
	close(stopping)
	sctx, cancel := context.WithTimeout(context.Background(), shutdownTimeout)
	defer cancel()
	err = srv.Shutdown(sctx)
	if serr := <-served; !errors.Is(serr, http.ErrServerClosed) {
		err = errors.Join(err, serr)
	}
	return errors.Join(failed, err)
}

// openPool opens a pool on dsn whose sessions are named application (as
// pg_stat_activity shows them), with maxConns connections unless the URL
// sets pool_max_conns, and checks that the database answers.
func openPool(ctx context.Context, dsn, application string, maxConns int32) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return nil, err
	}
	if !strings.Contains(dsn, "pool_max_conns") {
		cfg.MaxConns = maxConns
	}
	cfg.ConnConfig.RuntimeParams["application_name"] = application
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, err
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("cannot reach the database at %s:%d: %w", cfg.ConnConfig.Host, cfg.ConnConfig.Port, err)
	}
	return pool, nil
}
