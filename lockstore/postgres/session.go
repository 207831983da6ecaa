package postgres

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/claimbus/claimbus/lockstore"
)

// Sessions, not pooled statements.
//
// The Locker's locks and Exclusive's are session advisory locks: they live
// as long as the server session that took them. Behind a pooler in
// transaction or statement mode a client connection has no session of its
// own, and nothing fails: the locks are silently wrong. New therefore
// checks that its lock connections are sessions, with two facts that hold
// of every real session: its backend pid never changes, and no two
// sessions live at once share a pid (on one server: the pid is taken
// together with the postmaster's start time). Neither can be broken by a
// real session, so the check has no false positives; a pooler in
// transaction mode breaks the second at once when it hands the next
// client the server connection the last one just left (PgBouncer reuses
// the most recently used one first).
//
// At New each lock connection answers sessionProbeSQL as it is opened (it
// sets idle_session_timeout in the same statement, a round trip that was
// there already), in order; then a pooled connection answers; then each
// lock connection answers once more (sessionPIDSQL). Every answer of a
// later one falls between a lock connection's two answers, so any shared
// pid, or a changed one, is proof. That costs one round trip per lock
// connection and one on the pool. At each reconnect the pid of the probe
// is compared with the pid of the epoch bump, which answers it in its
// last statement: free, and it catches a busy pooler.

// A sessionID names a server session: its backend pid on the server that
// started at start (microseconds since 1970).
type sessionID struct {
	start int64
	pid   uint32
}

func (id sessionID) String() string { return fmt.Sprintf("backend pid %d", id.pid) }

// sessionProbeSQL turns idle_session_timeout (PostgreSQL 14+) off for the
// session, which would otherwise end it, and every lock on it, while the
// connection waits for work, and answers the session.
const sessionProbeSQL = `SELECT pg_backend_pid(), (extract(epoch FROM pg_postmaster_start_time()) * 1e6)::int8
FROM (SELECT count(set_config(name, '0', false)) FROM pg_settings WHERE name = 'idle_session_timeout') s`

// sessionPIDSQL answers the session.
const sessionPIDSQL = `SELECT pg_backend_pid(), (extract(epoch FROM pg_postmaster_start_time()) * 1e6)::int8`

// querySession runs sql (sessionProbeSQL or sessionPIDSQL) on conn with
// the simple protocol, which no pooler's handling of prepared statements
// can break before the check runs.
func querySession(ctx context.Context, conn *pgx.Conn, sql string) (sessionID, error) {
	var id sessionID
	err := conn.QueryRow(ctx, sql, pgx.QueryExecModeSimpleProtocol).Scan(&id.pid, &id.start)
	return id, err
}

// checkSessions is New's check (see the comment at the top of this file):
// first[i] is what lock connection conns[i] answered when it was opened,
// in the order they were opened.
func checkSessions(ctx context.Context, pool *pgxpool.Pool, conns []*pgx.Conn, first []sessionID) error {
	var pooled sessionID
	if err := pool.QueryRow(ctx, sessionPIDSQL, pgx.QueryExecModeSimpleProtocol).Scan(&pooled.pid, &pooled.start); err != nil {
		return fmt.Errorf("postgres: New: ask a pooled connection its session: %w: %w", lockstore.ErrUnavailable, err)
	}
	for i, conn := range conns {
		again, err := querySession(ctx, conn, sessionPIDSQL)
		if err != nil {
			return fmt.Errorf("postgres: New: ask lock connection %d its session: %w: %w", i, lockstore.ErrUnavailable, err)
		}
		if again != first[i] {
			return fmt.Errorf("postgres: New: lock connection %d answered from %v, then from %v: %w", i, first[i], again, ErrNoSession)
		}
		for j := i + 1; j < len(conns); j++ {
			if first[j] == first[i] {
				return fmt.Errorf("postgres: New: lock connections %d and %d, open at once, both answered from %v: %w", i, j, first[i], ErrNoSession)
			}
		}
		if pooled == first[i] {
			return fmt.Errorf("postgres: New: lock connection %d and a pooled connection, open at once, both answered from %v: %w", i, first[i], ErrNoSession)
		}
	}
	return nil
}
