package postgres

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/claimbus/claimbus/lockstore/internal/effects"

	"github.com/jackc/pgx/v5"

	"github.com/claimbus/claimbus/lockstore"
)

// runExclusive is Store.Exclusive for a fn that returns a value.
func runExclusive[T any](ctx context.Context, s *Store, key lockstore.Key, fn func(ctx context.Context, conn *pgx.Conn) (T, error)) (T, error) {
	var zero T
	id, err := s.precheck("Exclusive", key, fn == nil)
	if err != nil {
		return zero, err
	}
	if txScopeFor(ctx, s) != nil {
		return runSerialize(ctx, s, key, func(ctx context.Context, tx pgx.Tx) (T, error) {
			return fn(ctx, tx.Conn())
		})
	}
	if xs := exclusiveHolding(ctx, s, id); xs != nil {
		return fn(effects.WithToken(ctx, xs.token), xs.conn)
	}

	h, fctx, err := s.beginExclusive(ctx, key, id)
	if err != nil {
		return zero, err
	}
	// On a panic in fn, end unlocks and closes before the panic goes on
	// (its error is dropped: the panic wins); after the call below it does
	// nothing.
	defer func() { _ = h.end() }()
	v, err := fn(fctx, h.conn)
	if endErr := h.end(); endErr != nil {
		return v, errors.Join(err, endErr)
	}
	return v, err
}

// exclusiveHold is one held session lock of Exclusive. It holds id's turn
// in s.serial from beginExclusive until end, which passes it on once.
type exclusiveHold struct {
	s     *Store
	call  *call // its ctx is fn's; the watcher and Close stop it
	key   lockstore.Key
	id    LockID
	conn  *pgx.Conn
	pid   uint32
	token int64

	// confirmed is when the last check that found the session holding the
	// lock was sent (at first, when the lock was granted). The watcher
	// reads and writes it under its mutex.
	confirmed time.Time
	ended     bool
}

// beginExclusive takes the node-local mutex and a dedicated connection,
// waits for id's session lock on it, draws the token and has the watcher
// check the lock.
func (s *Store) beginExclusive(ctx context.Context, key lockstore.Key, id LockID) (*exclusiveHold, context.Context, error) {
	c, err := s.calls.start(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("postgres: Exclusive %q: %w", key, err)
	}
	if err := s.serial.take(c.ctx, s.ctx.Done(), id); err != nil {
		c.end()
		return nil, nil, fmt.Errorf("postgres: Exclusive %q: waiting for this node's turn: %w", key, c.stopCause(err))
	}
	var conn *pgx.Conn
	fail := func(err error) (*exclusiveHold, context.Context, error) {
		if conn != nil {
			// The connection never goes back to a pool: closing it frees
			// the lock if it was granted.
			closeConn(conn)
		}
		s.serial.pass(id)
		c.end()
		return nil, nil, fmt.Errorf("postgres: Exclusive %q: %w", key, c.stopCause(err))
	}
	if err := s.checkOpen(); err != nil {
		return fail(err)
	}
	conn, err = s.exclusiveConn(c.ctx)
	if err != nil {
		return fail(err)
	}
	if err := c.use(conn.PgConn().Conn()); err != nil {
		return fail(err)
	}
	token, pid, err := s.sessionLock(c.ctx, conn, id)
	if err != nil {
		return fail(err)
	}

	h := &exclusiveHold{s: s, call: c, key: key, id: id, conn: conn, pid: pid, token: token, confirmed: time.Now()}
	if err := s.calls.watch(s, h); err != nil {
		return fail(err)
	}
	fctx := effects.WithToken(c.ctx, token)
	return h, withExclusiveScope(fctx, &exclusiveScope{store: s, id: id, token: token, conn: conn}), nil
}

// exclusiveConn returns a connection of Exclusive's own: one dialled with
// Config.LockConnString when it is set (the pool may go through a pooler
// that keeps no session), else one taken out of the pool for good.
func (s *Store) exclusiveConn(ctx context.Context) (*pgx.Conn, error) {
	if s.cfg.LockConnString != "" {
		conn, err := pgx.ConnectConfig(ctx, s.connConfig)
		if err != nil {
			return nil, fmt.Errorf("connect: %w", err)
		}
		return conn, nil
	}
	pooled, err := s.pool.Acquire(ctx)
	if err != nil {
		return nil, fmt.Errorf("acquire a connection: %w", err)
	}
	return pooled.Hijack(), nil
}

// sessionLock waits for id's session lock on conn and draws a token in the
// same message, which also answers the session's backend pid (the
// server's: a pooler in session mode gives the client a key of its own). When the token comes back NULL (the epoch is not live, see
// epoch.go) it bumps the epoch on conn, which is outside any transaction,
// and draws again. On error the caller closes conn.
func (s *Store) sessionLock(ctx context.Context, conn *pgx.Conn, id LockID) (int64, uint32, error) {
	q := s.serialSQL()
	timeout, bounded := lockTimeout(ctx)
	results, err := conn.PgConn().Exec(ctx, sessionLockSQL(q, id, timeout, bounded, s.cfg.StatementTimeout)).ReadAll()
	var token *int64
	var pid uint32
	if err == nil {
		token, err = tokenResult(results)
	}
	if err == nil {
		pid, err = pidResult(results)
	}
	if err != nil {
		return 0, 0, fmt.Errorf("take the lock: %w", lockWaitError(ctx, err, bounded))
	}
	if token == nil {
		bctx, cancel := context.WithTimeout(ctx, s.cfg.Timeout)
		defer cancel()
		if err := s.bumpEpoch(bctx, conn); err != nil {
			return 0, 0, err
		}
		if err := conn.QueryRow(bctx, q.token).Scan(&token); err != nil {
			return 0, 0, fmt.Errorf("draw a token: %w", err)
		}
		if token == nil {
			return 0, 0, fmt.Errorf("draw a token: %w: the token epoch is still not live after a bump", lockstore.ErrUnavailable)
		}
	}
	return *token, pid, nil
}

// end stops the watch, unlocks, closes the connection and frees the
// node-local mutex. It returns an error when the lock was lost, could not
// be confirmed to the end, or the store closed. It does nothing the second
// time.
func (h *exclusiveHold) end() error {
	if h.ended {
		return nil
	}
	h.ended = true
	// First, so that the watcher does not take the unlock for a loss.
	h.s.calls.unwatch(h)

	ctx, cancel := h.s.cleanupContext()
	defer cancel()
	var unlocked bool
	err := h.conn.QueryRow(ctx, string(appendLockCall(make([]byte, 0, 64), "pg_advisory_unlock", h.id))).Scan(&unlocked)
	// The connection never goes back to a pool: closing it also frees the
	// lock if the unlock did not.
	_ = h.conn.Close(ctx)
	h.s.serial.pass(h.id)
	lost := h.call.reason()
	h.call.end()

	switch {
	case lost != nil:
		return fmt.Errorf("postgres: Exclusive %q: %w", h.key, lost)
	case err != nil:
		return fmt.Errorf("postgres: Exclusive %q: %w: unlock failed, the connection is closed: %w", h.key, lockstore.ErrLockLost, err)
	case !unlocked:
		return fmt.Errorf("postgres: Exclusive %q: %w: the session no longer held it at unlock", h.key, lockstore.ErrLockLost)
	}
	return nil
}

// sessionLockSQL answers the backend pid, waits for id's session lock, then
// draws a token (q.token), in one message. A simple-protocol message of several statements is one
// implicit transaction: settings made with set_config(..., true) end with
// it while the session lock stays. Bounded, it sets lock_timeout; else
// statement_timeout to stmtTimeout, unless one is in force already (see
// setStatementTimeoutSQL).
func sessionLockSQL(q *serialSQL, id LockID, timeoutMS int64, bounded bool, stmtTimeout time.Duration) string {
	b := make([]byte, 0, 512)
	b = append(b, "select pg_backend_pid(); "...)
	if bounded {
		b = append(b, "select set_config('lock_timeout', '"...)
		b = strconv.AppendInt(b, timeoutMS, 10)
		b = append(b, "', true); "...)
	} else {
		ms := strconv.AppendInt(nil, max(stmtTimeout.Milliseconds(), 1), 10)
		b = append(b, strings.Replace(setStatementTimeoutSQL, "$1", "'"+string(ms)+"'", 1)...)
		b = append(b, "; "...)
	}
	b = appendLockCall(b, "pg_advisory_lock", id)
	b = append(b, "; "...)
	b = append(b, q.token...)
	return string(b)
}
