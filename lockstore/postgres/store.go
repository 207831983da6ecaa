package postgres

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgconn/ctxwatch"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/claimbus/claimbus/lockstore"
)

// tokenSequence is the name of the fencing-token sequence in Config.Schema.
const tokenSequence = "lock_token"

// Store is a lockstore.Store on PostgreSQL session advisory locks, and the
// handle Serialize and Exclusive take. It is safe for concurrent use.
type Store struct {
	pool *pgxpool.Pool
	cfg  Config

	// lazyDelay is lazyUnlockDelay (tests lengthen it, before the first
	// ReleaseLater, to see what a lazy unlock waits for).
	lazyDelay time.Duration

	// namespaces and names are the registered namespaces (a copy of
	// Config.Namespaces) and their reverse.
	namespaces map[string]int32
	names      map[int32]string

	// tokenSQL is the fencing-token sequence as a regclass SQL literal, and
	// batchSQL the statement of a lock connection's round trip, which draws
	// from it.
	tokenSQL string
	batchSQL string

	// connConfig opens the lock connections (and every other connection
	// that holds session locks): the pool's, or Config.LockConnString's,
	// with Node as application_name and TCP keepalive after
	// Config.KeepAlive.
	connConfig *pgx.ConnConfig
	// connsMu guards conns, the lock connections (the base ones first),
	// and the fields of their growth (see conns.go); active is the set new
	// grants go to.
	connsMu    sync.Mutex
	conns      []*lockConn
	active     atomic.Pointer[[]*lockConn]
	nextIndex  int
	maxConns   int
	growing    bool
	growFailed time.Time
	growRetry  *time.Timer // calls rebalance after a failed growth
	closing    bool
	// held counts the locks held and the lock requests on their way, for
	// maxHeld (Config.MaxHeld, or its default from the server's settings).
	held    atomic.Int64
	maxHeld int
	// stats are the totals Stats reports.
	stats storeStats
	// queue is the node-local turn queue in front of the lock connections.
	queue *turnQueue
	// serial is the node-local turn queue of Serialize and Exclusive, so
	// that a node's own callers for one key wait in Go, not each on a
	// pooled connection blocked on the server. It is separate from queue:
	// a Locker holder calling Serialize on its own key would otherwise
	// wait for itself.
	serial *turnQueue

	// ctx is the store's own context: every round trip on a shared
	// connection runs under it (never under a caller's), the lock
	// connections' under tripCtx, and Close cancels it.
	ctx    context.Context
	cancel context.CancelFunc
	// tripCtx is ctx without its cancellation: the lock connections' round
	// trips run under it and their deadline, so that Close lets the one in
	// flight finish (its unlocks then end released, not lost).
	tripCtx context.Context

	// calls are the running Serialize and Exclusive calls, which Close
	// stops, and Exclusive's lock watcher (calls.go, watch.go).
	calls calls

	closed    atomic.Bool
	closeOnce sync.Once
	// wg counts the goroutines the store started; Close waits for them.
	wg sync.WaitGroup
}

// New returns a store on pool's database. It validates cfg, brings the
// schema up to date (see Migrations: safe when many nodes start at once;
// with Config.NoAutoMigrate it only checks the version) and connects the lock connections, which it opens with the
// pool's connection configuration (credentials, application_name and
// settings carry over) but outside the pool, or with Config.LockConnString
// when it is set. It fails with an error matching ErrNoSession when the
// lock connections do not keep a session (a pooler in transaction or
// statement mode: see session.go), at the cost of one round trip per lock
// connection and one on the pool.
func New(ctx context.Context, pool *pgxpool.Pool, cfg Config) (*Store, error) {
	if pool == nil {
		return nil, errors.New("postgres: New: nil pool")
	}
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	connConfig := pool.Config().ConnConfig
	appName := connConfig.RuntimeParams["application_name"]
	if cfg.LockConnString != "" {
		lc, err := pgx.ParseConfig(cfg.LockConnString)
		if err != nil { // Validate parsed it already
			return nil, fmt.Errorf("postgres: Config.LockConnString: %s", redactParseError(err))
		}
		connConfig = lc
		appName = cmp.Or(appName, lc.RuntimeParams["application_name"])
	}
	cfg = cfg.withDefaults(appName)

	s := &Store{
		pool:       pool,
		cfg:        cfg,
		lazyDelay:  lazyUnlockDelay,
		namespaces: make(map[string]int32, len(cfg.Namespaces)),
		names:      make(map[int32]string, len(cfg.Namespaces)),
	}
	for name, n := range cfg.Namespaces {
		s.namespaces[name] = n
		s.names[n] = name
	}
	s.cfg.Namespaces = s.namespaces
	seq := pgx.Identifier{cfg.Schema, tokenSequence}.Sanitize()
	s.tokenSQL = "'" + strings.ReplaceAll(seq, "'", "''") + "'::regclass"
	s.batchSQL = batchSQLFor(s.tokenSQL)
	s.connConfig = lockConnConfig(connConfig, cfg)
	s.queue = newTurnQueue()
	s.serial = newTurnQueue()

	if err := s.sizeCapacity(ctx); err != nil {
		return nil, err
	}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	s.tripCtx = context.WithoutCancel(s.ctx)
	// The first connections are opened here, under ctx, so that New fails
	// when the database cannot be reached; later ones by their owners.
	stop := context.AfterFunc(ctx, s.cancel)
	defer stop()
	s.conns = make([]*lockConn, cfg.LockConns)
	s.nextIndex = cfg.LockConns
	active := slices.Clone(s.conns)
	s.active.Store(&active)
	// Every lock connection is opened and asked its session first, then
	// checked (see session.go), then set up.
	opened := make([]*pgx.Conn, 0, cfg.LockConns)
	ids := make([]sessionID, 0, cfg.LockConns)
	closeOpened := func() {
		s.cancel()
		for _, conn := range opened {
			closeConn(conn)
		}
	}
	var errs []error
	for i := range s.conns {
		c := newLockConn(s, i, true)
		s.conns[i] = c
		active[i] = c
		cctx, cancel := context.WithTimeout(s.ctx, cfg.ConnectTimeout)
		conn, id, err := s.dialLock(cctx)
		cancel()
		if err != nil {
			errs = append(errs, fmt.Errorf("lock connection %d: %w", i, err))
			continue
		}
		opened = append(opened, conn)
		ids = append(ids, id)
	}
	if err := errors.Join(errs...); err != nil {
		closeOpened()
		return nil, fmt.Errorf("postgres: New: %w: %w", lockstore.ErrUnavailable, err)
	}
	cctx, cancel := context.WithTimeout(s.ctx, cfg.ConnectTimeout)
	err := checkSessions(cctx, pool, opened, ids)
	cancel()
	if err == nil {
		// After the session check, so that a pooler in transaction mode is
		// reported as such; before setup, whose epoch bump needs the tables.
		err = s.ensureSchema(ctx)
	}
	if err != nil {
		closeOpened()
		return nil, err
	}
	for i, c := range s.conns {
		cctx, cancel := context.WithTimeout(s.ctx, cfg.ConnectTimeout)
		err := c.setup(cctx, opened[i], ids[i])
		cancel()
		if err != nil {
			// setup closed opened[i].
			errs = append(errs, fmt.Errorf("lock connection %d: %w", i, err))
		}
	}
	if err := errors.Join(errs...); err != nil {
		s.cancel()
		for _, c := range s.conns {
			if c.conn != nil {
				closeConn(c.conn)
			}
		}
		if errors.Is(err, ErrNoSession) {
			return nil, fmt.Errorf("postgres: New: %w", err)
		}
		return nil, fmt.Errorf("postgres: New: %w: %w", lockstore.ErrUnavailable, err)
	}
	if !stop() {
		// ctx ended after the last connection: nothing runs yet.
		s.cancel()
		for _, c := range s.conns {
			closeConn(c.conn)
		}
		return nil, fmt.Errorf("postgres: New: %w", ctx.Err())
	}
	for _, c := range s.conns {
		s.wg.Add(1)
		go c.run()
	}
	return s, nil
}

// lockConnConfig derives the lock connections' configuration from the
// pool's: the same credentials, settings and hooks, with application_name
// set to the node's name, and TCP keepalive probes after KeepAlive idle.
func lockConnConfig(pool *pgx.ConnConfig, cfg Config) *pgx.ConnConfig {
	cc := pool.Copy()
	cc.RuntimeParams["application_name"] = cfg.Node
	// Interrupting a read (the idle watch, a timed-out round trip) sets a
	// deadline on the socket; a pool configured to send cancel requests
	// instead would open a connection to the server for each.
	cc.BuildContextWatcherHandler = func(pc *pgconn.PgConn) ctxwatch.Handler {
		return &pgconn.DeadlineContextWatcherHandler{Conn: pc.Conn()}
	}
	dial := cc.DialFunc
	keepAlive := net.KeepAliveConfig{Enable: true, Idle: cfg.KeepAlive, Interval: cfg.KeepAlive, Count: 3}
	cc.DialFunc = func(ctx context.Context, network, addr string) (net.Conn, error) {
		nc, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		if tc, ok := nc.(*net.TCPConn); ok {
			_ = tc.SetKeepAliveConfig(keepAlive)
		}
		return nc, nil
	}
	return cc
}

// sizeCapacity sets maxHeld (Config.MaxHeld, or a quarter of the
// server's lock table) and maxConns.
func (s *Store) sizeCapacity(ctx context.Context) error {
	s.maxHeld = s.cfg.MaxHeld
	if s.maxHeld == 0 {
		var table int64
		err := s.pool.QueryRow(ctx, `SELECT current_setting('max_locks_per_transaction')::int8 *
			(current_setting('max_connections')::int8 + current_setting('max_prepared_transactions')::int8)`).Scan(&table)
		if err != nil {
			return fmt.Errorf("postgres: New: read the size of the server's lock table: %w", err)
		}
		s.maxHeld = int(max(table/4, 1))
	}
	extra := (s.maxHeld + s.cfg.LocksPerConn - 1) / s.cfg.LocksPerConn
	s.maxConns = s.cfg.LockConns + min(extra, maxExtraConns)
	return nil
}

// maxExtraConns bounds the lock connections opened beyond Config.LockConns.
const maxExtraConns = 256

// Pool returns the pool the store was made with (Serialize runs on it).
func (s *Store) Pool() *pgxpool.Pool { return s.pool }

// checkOpen returns lockstore.ErrClosed once Close has been called.
func (s *Store) checkOpen() error {
	if s.closed.Load() {
		return lockstore.ErrClosed
	}
	return nil
}

// Close ends every lock the store granted (closing their Lost channels),
// fails its waiters with lockstore.ErrClosed, closes the lock connections
// and waits for every goroutine the store started. It does not close the
// pool. Close is idempotent.
func (s *Store) Close() error {
	s.closeOnce.Do(func() {
		s.closed.Store(true)
		// No connection opens from now on (see rebalance).
		s.connsMu.Lock()
		s.closing = true
		if s.growRetry != nil {
			s.growRetry.Stop()
		}
		s.connsMu.Unlock()
		s.cancel()
		s.calls.closeAll(s.cfg.Timeout) // Serialize and Exclusive: stop, wait up to Timeout, then close their sockets
		s.wg.Wait()
	})
	return nil
}
