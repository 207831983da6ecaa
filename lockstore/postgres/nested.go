package postgres

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/claimbus/claimbus/lockstore"
	"github.com/claimbus/claimbus/lockstore/internal/txnest"
)

// nestedSerialize is Serialize inside an open transaction sc: fn runs in a
// savepoint of it (txnest.Run), holding key's xact lock (taken in the
// savepoint unless the transaction, or an enclosing Exclusive, holds it
// already), with key's token and effects of its own.
func nestedSerialize[T any](ctx context.Context, s *Store, sc *txScope, key lockstore.Key, id LockID, fn func(ctx context.Context, tx pgx.Tx) (T, error)) (T, error) {
	if sc.Tx == nil {
		var zero T
		return zero, fmt.Errorf("postgres: Serialize %q: WithTx was given a nil transaction", key)
	}
	return txnest.Run(ctx, txnest.Nested[pgx.Tx, LockID]{
		Op: "postgres: Serialize", Key: key, Tx: sc.Tx, Held: &sc.Held, ID: id,
		Enclosing: func() (int64, bool) {
			// An enclosing Exclusive's session holds id, maybe on another
			// connection than the transaction's: the call chain has the
			// key already, and waiting for it from this transaction would
			// wait for that call for ever.
			if xs := exclusiveHolding(ctx, s, id); xs != nil {
				return xs.token, true
			}
			return 0, false
		},
		Savepoint: &savepoint{s: s, tx: sc.Tx, key: key, id: id},
	}, fn)
}

// savepoint is a nested Serialize's savepoint (txnest.Savepoint).
type savepoint struct {
	s   *Store
	tx  pgx.Tx
	key lockstore.Key
	id  LockID
}

// Open opens the savepoint and, unless held, takes id's lock in it and
// draws a token. A key the transaction holds costs one round trip (the
// savepoint); a new one costs one too (savepoint, lock and token in one
// message).
func (n *savepoint) Open(ctx context.Context, token int64, held bool) (int64, error) {
	if !held {
		return n.lock(ctx)
	}
	if _, err := n.tx.Exec(ctx, txnest.SavepointSQL); err != nil {
		return 0, fmt.Errorf("postgres: Serialize %q: savepoint: %w", n.key, err)
	}
	return token, nil
}

// lock opens the savepoint, takes id's lock in it and draws a token. When
// the token comes back NULL (the epoch is not live, see epoch.go), it bumps
// the epoch on a connection of its own (the transaction's is inside a
// transaction) and draws again.
func (n *savepoint) lock(ctx context.Context) (int64, error) {
	s := n.s
	conn := n.tx.Conn()
	q := s.serialSQL()
	timeout, bounded := lockTimeout(ctx)
	results, err := conn.PgConn().Exec(ctx, nestedLockSQL(q, n.id, timeout, bounded)).ReadAll()
	var token *int64
	if err == nil {
		token, err = tokenResult(results)
	}
	if err != nil {
		err = lockWaitError(ctx, err, bounded)
		if !conn.IsClosed() {
			// The wait failed on the server: undo it, so that the outer
			// transaction stays usable (its fn decides what comes next).
			if rbErr := n.Rollback(); rbErr != nil {
				err = errors.Join(err, fmt.Errorf("rollback to savepoint: %w", rbErr))
			}
		}
		return 0, fmt.Errorf("postgres: Serialize %q: take the lock in the open transaction: %w", n.key, err)
	}
	if token == nil {
		err = s.bumpEpochAside(ctx)
		if err == nil {
			err = n.tx.QueryRow(ctx, q.token).Scan(&token)
		}
		if err == nil && token == nil {
			err = fmt.Errorf("%w: the token epoch is still not live after a bump", lockstore.ErrUnavailable)
		}
		if err != nil {
			if rbErr := n.Rollback(); rbErr != nil {
				err = errors.Join(err, fmt.Errorf("rollback to savepoint: %w", rbErr))
			}
			return 0, fmt.Errorf("postgres: Serialize %q: draw a token: %w", n.key, err)
		}
	}
	return *token, nil
}

// tokenResult reads the token from the last result of a simple-protocol
// message: nil when it is NULL.
func tokenResult(results []*pgconn.Result) (*int64, error) {
	if len(results) == 0 || len(results[len(results)-1].Rows) != 1 || len(results[len(results)-1].Rows[0]) != 1 {
		return nil, errors.New("no token in the answer")
	}
	v := results[len(results)-1].Rows[0][0]
	if v == nil {
		return nil, nil
	}
	t, err := strconv.ParseInt(string(v), 10, 64)
	if err != nil {
		return nil, fmt.Errorf("token %q: %w", v, err)
	}
	return &t, nil
}

// pidResult reads the backend pid from the first result of
// sessionLockSQL's message.
func pidResult(results []*pgconn.Result) (uint32, error) {
	if len(results) == 0 || len(results[0].Rows) != 1 || len(results[0].Rows[0]) != 1 {
		return 0, errors.New("no backend pid in the answer")
	}
	pid, err := strconv.ParseUint(string(results[0].Rows[0][0]), 10, 32)
	if err != nil {
		return 0, fmt.Errorf("backend pid %q: %w", results[0].Rows[0][0], err)
	}
	return uint32(pid), nil
}

// bumpEpochAside bumps the token epoch on a connection of its own, opened
// from the lock connections' configuration and closed after, for a caller
// whose connection is inside a transaction.
func (s *Store) bumpEpochAside(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.Timeout)
	defer cancel()
	conn, err := pgx.ConnectConfig(ctx, s.connConfig)
	if err != nil {
		return fmt.Errorf("connect to bump the token epoch: %w", err)
	}
	defer closeConn(conn)
	return s.bumpEpoch(ctx, conn)
}

// Release releases the savepoint once fn has succeeded.
func (n *savepoint) Release() error {
	ctx, cancel := n.s.cleanupContext()
	defer cancel()
	_, err := n.tx.Exec(ctx, txnest.ReleaseSQL)
	return err
}

// Rollback undoes everything since the savepoint, and ends it. The xact
// locks taken inside it are freed with it (this call's, and those nested
// calls released into it), which txnest.Run forgets.
func (n *savepoint) Rollback() error {
	ctx, cancel := n.s.cleanupContext()
	defer cancel()
	_, err := n.tx.Exec(ctx, rollbackSavepointSQL)
	return err
}
