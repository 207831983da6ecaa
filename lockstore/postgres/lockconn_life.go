package postgres

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/claimbus/claimbus/internal/afterlost"
	"github.com/claimbus/claimbus/lockstore"
)

// The life of a lock connection: connect, run (the owner goroutine), idle
// (watching the socket and keeping the lease), reconnect, and the ways it
// ends (fail, shutdown, retire, all through drop).

// connect opens the connection. The store's context and ConnectTimeout
// bound it.
func (c *lockConn) connect() error {
	ctx, cancel := context.WithTimeout(c.s.ctx, c.s.cfg.ConnectTimeout)
	defer cancel()
	conn, id, err := c.s.dialLock(ctx)
	if err != nil {
		return err
	}
	return c.setup(ctx, conn, id)
}

// dialLock opens a lock connection and asks it its session (see
// session.go), which also turns its idle_session_timeout off.
func (s *Store) dialLock(ctx context.Context) (*pgx.Conn, sessionID, error) {
	conn, err := pgx.ConnectConfig(ctx, s.connConfig)
	if err != nil {
		return nil, sessionID{}, err
	}
	id, err := querySession(ctx, conn, sessionProbeSQL)
	if err != nil {
		closeConn(conn)
		return nil, sessionID{}, err
	}
	return conn, id, nil
}

// setup bumps the token epoch on conn, a connection dialLock opened on
// session id, checks that the bump ran on the same session, and makes conn
// the lock connection. On error it closes conn. ctx bounds it.
func (c *lockConn) setup(ctx context.Context, conn *pgx.Conn, id sessionID) error {
	sent := time.Now()
	// Tokens drawn on this session must be above every token drawn before
	// a crash that came before it (see epoch.go).
	pid, err := c.s.bumpEpochPID(ctx, conn)
	if err != nil {
		closeConn(conn)
		return err
	}
	if pid != id.pid {
		closeConn(conn)
		return fmt.Errorf("the connection answered from backend pid %d, then from %d: %w", id.pid, pid, ErrNoSession)
	}
	c.conn = conn
	c.confirmed = sent
	c.mu.Lock()
	c.gen++
	c.up = true
	c.orphans = nil
	c.avail.Store(connFree)
	// The server's pid, not the one in the connection's BackendKeyData: a
	// pooler in session mode gives the client a key of its own.
	c.pid = id.pid
	c.lastErr = nil
	c.mu.Unlock()
	return nil
}

// run is the owner goroutine: it serves requests, watches the idle
// connection, and replaces a dead connection, until the store's context
// ends, or, for an extra connection, until it holds nothing or fails.
func (c *lockConn) run() {
	defer c.s.wg.Done()
	if !c.base {
		// Extra connections connect here, and join the active set once up.
		err := c.connect()
		c.s.grown(c, err)
		if err != nil {
			c.retire()
			return
		}
	}
	// The owner waits idleWatchDelay on the wake channel alone before it
	// reads the idle connection: entering and leaving that read costs a
	// few goroutine switches, which a busy connection should not pay
	// between two round trips.
	grace := time.NewTimer(idleWatchDelay)
	defer grace.Stop()
	for {
		if c.conn == nil {
			if !c.base {
				c.retire()
				return
			}
			if !c.reconnect() {
				c.shutdown()
				return
			}
		}
		select {
		case <-c.s.ctx.Done():
			c.shutdown()
			return
		case <-c.wake:
			c.flush()
			continue
		default:
		}
		grace.Reset(idleWatchDelay)
		select {
		case <-c.s.ctx.Done():
			c.shutdown()
			return
		case <-c.wake:
			grace.Stop()
			c.flush()
		case <-grace.C:
			c.idle()
			if !c.base && c.conn != nil && c.s.retireIdle(c) {
				return
			}
		}
	}
}

// idleWatchDelay is how long a lock connection waits for work before it
// watches its socket (see run and idle).
const idleWatchDelay = 2 * time.Millisecond

// idle waits for work while reading the idle connection, so that a
// session the server ends (pg_terminate_backend, a shutdown: the server
// says so before it closes the socket) or a socket the kernel closes is
// noticed at once. A submit interrupts the read (it cancels the watch: the
// read times out and the connection stays usable). KeepAlive after the
// last confirmation the connection is pinged, under the lease deadline: a
// peer that went silent costs the connection, and its locks, within
// LeaseBound of the last round trip that succeeded.
func (c *lockConn) idle() {
	ctx, cancel := context.WithDeadline(c.s.ctx, c.confirmed.Add(c.s.cfg.KeepAlive))
	defer cancel()
	c.mu.Lock()
	if len(c.pending) > 0 {
		c.mu.Unlock()
		return
	}
	c.watchCancel = cancel
	c.mu.Unlock()
	err := c.conn.PgConn().WaitForNotification(ctx)
	c.mu.Lock()
	c.watchCancel = nil
	c.mu.Unlock()
	switch {
	case c.s.ctx.Err() != nil:
		// Closing: run shuts down.
	case err == nil:
		// A notification (nobody LISTENs here): nothing to do.
	case ctx.Err() == nil:
		c.fail(fmt.Errorf("connection lost while idle: %w", err), nil)
	case errors.Is(ctx.Err(), context.DeadlineExceeded):
		sent := time.Now()
		pctx, pcancel := context.WithDeadline(c.s.ctx, c.deadline(sent))
		c.avail.Store(connInFlight)
		err := c.conn.Ping(pctx)
		pcancel()
		if err != nil {
			c.fail(fmt.Errorf("ping: %w", err), nil)
			return
		}
		c.avail.Store(connFree)
		c.confirmed = sent
	default:
		// Woken by submit: run flushes.
	}
}

// reconnect replaces the connection, waiting between attempts with a
// doubling backoff, with jitter, up to Config.ReconnectBackoff. It returns
// false when the store's context ends first.
func (c *lockConn) reconnect() bool {
	b := newBackoff(firstReconnectBackoff, c.s.cfg.ReconnectBackoff)
	timer := time.NewTimer(nextWait(b, c.s.cfg.ReconnectBackoff))
	defer timer.Stop()
	for {
		select {
		case <-c.s.ctx.Done():
			return false
		case <-timer.C:
		}
		err := c.connect()
		if err == nil {
			c.s.stats.reconnects.Add(1)
			c.mu.Lock()
			down := time.Since(c.downSince)
			c.mu.Unlock()
			c.s.cfg.Logger.LogAttrs(c.s.ctx, slog.LevelInfo, "claimbus: lock connection back",
				slog.Int("conn", c.index), slog.Duration("down_for", down))
			return true
		}
		c.mu.Lock()
		c.lastErr = err
		c.mu.Unlock()
		timer.Reset(nextWait(b, c.s.cfg.ReconnectBackoff))
	}
}

// fail closes the connection after err, ends every lock it held, and fails
// the requests in flight and pending. The owner reconnects afterwards.
func (c *lockConn) fail(err error, inflight []*request) {
	c.drop(fmt.Errorf("lock connection %d: %w", c.index, err), inflight, false)
}

// shutdown is fail for Close: requests fail with lockstore.ErrClosed. The
// unlocks pending (a ReleaseLater waiting for company, a Release racing
// Close) are sent first, within Config.Timeout, so that a lock released
// before Close is reported released, not lost.
func (c *lockConn) shutdown() {
	if c.conn != nil {
		c.mu.Lock()
		var unlocks []*request
		rest := c.pending[:0]
		for _, r := range c.pending {
			if r.kind == unlockRequest {
				unlocks = append(unlocks, r) // eager goes with drop
			} else {
				rest = append(rest, r)
			}
		}
		clear(c.pending[len(rest):])
		c.pending = rest
		c.mu.Unlock()
		if len(unlocks) > 0 {
			ctx, cancel := context.WithTimeout(c.s.tripCtx, c.s.cfg.Timeout)
			err := c.roundTrip(ctx, unlocks)
			cancel()
			if err != nil {
				c.drop(lockstore.ErrClosed, unlocks, true)
				return
			}
		}
	}
	c.drop(lockstore.ErrClosed, nil, true)
}

// retire takes an extra connection that failed or is idle out of the
// store; its owner goroutine then returns.
func (c *lockConn) retire() {
	c.mu.Lock()
	c.retired = true
	c.avail.Store(connDown)
	c.mu.Unlock()
	c.s.removeConn(c)
}

func (c *lockConn) drop(cause error, inflight []*request, closing bool) {
	// A round trip cut short by Close fails like any other: report it as
	// the store closing, not as the connection being down.
	closing = closing || c.s.ctx.Err() != nil
	if !closing {
		// The old session may hold these a while yet (a server that ends it
		// frees its locks after saying so; a silent one, later): until this
		// connection is back, their claims come here and fail fast, not
		// elsewhere with ErrLocked (see connFor).
		c.mu.Lock()
		c.orphans = make(map[LockID]struct{}, len(c.held)+len(inflight))
		for id := range c.held {
			c.orphans[id] = struct{}{}
		}
		for _, r := range inflight {
			if r.kind == lockRequest {
				c.orphans[r.id] = struct{}{}
			}
		}
		c.mu.Unlock()
	}
	c.avail.Store(connDown)
	if c.conn != nil {
		if closing {
			ctx, cancel := context.WithTimeout(context.Background(), c.s.cfg.Timeout)
			_ = c.conn.Close(ctx)
			cancel()
		} else {
			closeConn(c.conn)
		}
		c.conn = nil
	}
	c.mu.Lock()
	c.up = false
	c.pid = 0
	if closing {
		c.closed = true
	} else {
		c.lastErr = cause
		if !c.base {
			// Requests go to another connection from now on.
			c.retired = true
		}
	}
	reqErr := c.unavailableLocked()
	lostErr := fmt.Errorf("%w: %w", lockstore.ErrLockLost, cause)
	if closing {
		reqErr = lockstore.ErrClosed
		lostErr = fmt.Errorf("%w: %w", lockstore.ErrLockLost, lockstore.ErrClosed)
	}
	pending := c.pending
	c.pending, c.eager = nil, 0
	// The server freed every lock of the closed session. They end under
	// c.mu, so that a Release that finds the connection down (submit fails)
	// knows its lock has already ended and its turn passed on.
	held := len(c.held)
	if !closing {
		c.s.stats.lost.Add(int64(held))
		c.downSince = time.Now()
	}
	fire := make([]afterlost.Chain, 0, held)
	for _, l := range c.held {
		fire = append(fire, l.end(lostErr))
	}
	clear(c.held)
	c.mu.Unlock()
	if !closing {
		c.s.cfg.Logger.LogAttrs(context.Background(), slog.LevelWarn, "claimbus: lock connection down",
			slog.Int("conn", c.index), slog.Int("locks_lost", held), slog.Any("error", cause))
	}
	for _, f := range fire {
		f.Fire()
	}
	for range held {
		c.unload()
	}

	for _, rs := range [][]*request{inflight, pending} {
		for _, r := range rs {
			if r.kind == unlockRequest {
				// Its lock was among held: it ended with the session, but
				// nothing confirmed it was held up to the unlock.
				r.err = fmt.Errorf("postgres: release %s: %w", r.lock.key, lostErr)
				r.finish()
				continue
			}
			c.refuse(r, reqErr)
		}
	}
}

// closeConn closes a lock connection that failed or is in doubt: the
// socket first, so that the server sees the close and ends the session
// (freeing its locks) at once, however the network behaves; pgx's own
// Close would first try to say goodbye on a socket that may be silent.
func closeConn(conn *pgx.Conn) {
	_ = conn.PgConn().Conn().Close()
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	_ = conn.Close(ctx)
	cancel()
}
