package postgres

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// Tokens that never go back.
//
// Fencing tokens are drawn from one sequence (nextval), which is fast and
// grows across every node while the server runs. A sequence is not
// crash-safe on its own: nextval writes its WAL record without waiting for
// it to reach the disk, and with synchronous_commit = off (a server setting
// the application does not control) even committed work may be lost in a
// crash, so crash recovery can bring the sequence back below values already
// handed out.
//
// An epoch makes it safe. The table lock_epoch holds one counter. Every
// lock connection, when it connects (so after every crash, which ends every
// session), bumps it in a transaction committed with synchronous_commit =
// on, which waits until the commit, and every WAL record before it, is
// flushed: a bump that was seen is never lost. Only then does it move the
// sequence up to epoch << 32 (setval, when the sequence is below). So a
// value at or above e << 32 is handed out only once epoch e is durable, and
// after a crash the next bump (to at least e + 1) lifts the sequence above
// every value handed out before it, wherever recovery left the sequence.
// Bumps are serialized by a session advisory lock (epochLockKey), so that
// two nodes connecting at once never move the sequence down. This holds as
// long as fewer than 2^32 tokens are drawn between two connects of any lock
// connection of any node sharing the database.
//
// lock_epoch_live is an unlogged table holding the epoch once the sequence
// has been moved up for it. PostgreSQL empties unlogged tables in crash
// recovery (and they are not replicated), so a session that finds it empty
// knows the sequence may have gone back and bumps before it draws a token:
// Serialize and Exclusive, which draw tokens on pooled connections, rely on
// it.

// epochLockKey is the bigint advisory lock that serializes epoch bumps.
const epochLockKey int64 = 0x636c61696d657063 // "claimepc"

// Names of the epoch tables in Config.Schema (created by the migrations:
// see migrations/).
const (
	epochTable     = "lock_epoch"
	epochLiveTable = "lock_epoch_live"
)

// bumpEpoch runs an epoch bump (see the comment at the top of this file)
// on conn, a connection outside any transaction, in one round trip. On
// error the session may still hold epochLockKey: the caller closes conn.
func (s *Store) bumpEpoch(ctx context.Context, conn *pgx.Conn) error {
	_, err := s.bumpEpochPID(ctx, conn)
	return err
}

// bumpEpochPID is bumpEpoch, and returns the backend pid its last
// statement ran on (see session.go).
func (s *Store) bumpEpochPID(ctx context.Context, conn *pgx.Conn) (uint32, error) {
	epoch := pgx.Identifier{s.cfg.Schema, epochTable}.Sanitize()
	live := pgx.Identifier{s.cfg.Schema, epochLiveTable}.Sanitize()
	var b pgx.Batch
	b.Queue("SELECT pg_advisory_lock($1::int8)", epochLockKey)
	b.Queue("BEGIN")
	b.Queue("SET LOCAL synchronous_commit = on")
	b.Queue("UPDATE " + epoch + " SET epoch = epoch + 1 WHERE id = 1")
	b.Queue("COMMIT")
	b.Queue("SELECT setval(" + s.tokenSQL + ", e.epoch << 32) FROM " + epoch + " e WHERE nextval(" + s.tokenSQL + ") < e.epoch << 32")
	b.Queue("INSERT INTO " + live + " (id, epoch) SELECT 1, epoch FROM " + epoch + " WHERE id = 1 ON CONFLICT (id) DO UPDATE SET epoch = excluded.epoch")
	b.Queue("SELECT pg_advisory_unlock($1::int8), pg_backend_pid()", epochLockKey)
	br := conn.SendBatch(ctx, &b)
	var err error
	for range b.Len() - 1 {
		if _, err = br.Exec(); err != nil {
			break
		}
	}
	var unlocked bool
	var pid uint32
	if err == nil {
		err = br.QueryRow().Scan(&unlocked, &pid)
	}
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return 0, fmt.Errorf("bump the token epoch: %w", err)
	}
	return pid, nil
}

// liveTokenSQL is a scalar subquery that draws a token when the epoch is
// live (see the comment at the top of this file), and is NULL when the
// sequence may have gone back since the last bump.
func (s *Store) liveTokenSQL() string {
	live := pgx.Identifier{s.cfg.Schema, epochLiveTable}.Sanitize()
	return "(SELECT nextval(" + s.tokenSQL + ") FROM " + live + " WHERE id = 1)"
}
