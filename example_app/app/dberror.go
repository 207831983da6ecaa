package app

import (
	"context"
	"errors"
	"fmt"

	"github.com/claimbus/claimbus/lockstore"
	"github.com/claimbus/claimbus/lockstore/postgres"
	"github.com/claimbus/claimbus/lockstore/sqlite"
	"github.com/claimbus/claimbus/middleware"
)

// The node reaches its database through db, tx and serialize below, never
// through the backend directly: they turn the errors every backend has in
// its own words into the node's answers, in one place (dbError).

// errDBUnavailable is what a request that failed because the database
// cannot be reached is answered: 503, try again. It names no server: the
// driver's error is wrapped beside it and logged, never sent.
var errDBUnavailable = &middleware.Rejection{Code: middleware.CodeUnavailable, Message: "the database cannot be reached now, try again"}

// errDBBusy is errDBUnavailable for a database that answers but was kept
// busy by other writers past the wait for its write lock: an overload.
var errDBBusy = &middleware.Rejection{Code: middleware.CodeUnavailable, Message: "the database is busy with other writes, try again"}

// errStopped is what a command is answered whose context was cancelled
// while it ran: its lock or claim was lost, or the node is stopping. What
// it wrote in a transaction is rolled back.
var errStopped = &middleware.Rejection{Code: middleware.CodeUnavailable, Message: "the command was stopped before it finished (its lock was lost, or the node is stopping), try again"}

// errBadValue is what a request is answered whose value the database
// refused although the validation let it through: 422 naming no field,
// since the database does not say which.
var errBadValue = &middleware.Rejection{Code: middleware.CodeInvalid, Message: "a value of the request cannot be stored"}

// dbError returns err, from the database under ctx, as the node answers
// it: an outage matches errDBUnavailable, an overload errDBBusy (both
// middleware.ErrUnavailable),
// a cancelled handler errStopped, a refused value errBadValue (logged: the
// validation has a gap), each with
// err wrapped beside the rejection; anything else, rejections included, is
// err as it is. It is idempotent.
func (n *Node) dbError(ctx context.Context, err error) error {
	var rej *middleware.Rejection
	switch {
	case err == nil, errors.As(err, &rej):
		return err
	case n.backend.isUnavailable(ctx, err) && n.backend.isBusy(err):
		return fmt.Errorf("%w: %w", errDBBusy, err)
	case n.backend.isUnavailable(ctx, err):
		return fmt.Errorf("%w: %w", errDBUnavailable, err)
	case ctx.Err() != nil && !errors.Is(context.Cause(ctx), context.DeadlineExceeded):
		// A handler's context is cancelled when its lock or claim is lost
		// or the bus closes; a request's when its client went away. A
		// hook's is cancelled too when its sender's deadline passes: that
		// is the sender's timeout, not a stop.
		return fmt.Errorf("%w: %w", errStopped, err)
	case n.backend.isBadValue(err):
		n.log.WarnContext(ctx, "the database refused a value the validation let through", "command_id", commandID(ctx), "error", err)
		return fmt.Errorf("%w: %w", errBadValue, err)
	}
	return err
}

// db runs statements outside any transaction.
func (n *Node) db() querier { return checkedQuerier{n: n, q: n.backend.db()} }

// q runs statements in the command's transaction when ctx carries one
// (txcommand's), and as db does otherwise.
func (n *Node) q(ctx context.Context) querier {
	if tx, ok := postgres.TxFrom(ctx); ok {
		return checkedQuerier{n: n, q: pgQuerier{tx}}
	}
	if tx, ok := sqlite.TxFrom(ctx); ok {
		return checkedQuerier{n: n, q: sqlQuerier{tx}}
	}
	return n.db()
}

// tx runs fn in a transaction (see Backend.tx).
func (n *Node) tx(ctx context.Context, fn txFunc) error {
	return n.dbError(ctx, n.backend.tx(ctx, func(ctx context.Context, q querier) error {
		return fn(ctx, checkedQuerier{n: n, q: q})
	}))
}

// serialize runs fn in a transaction holding key's lock (see
// Backend.serialize).
func (n *Node) serialize(ctx context.Context, key lockstore.Key, fn txFunc) error {
	return n.dbError(ctx, n.backend.serialize(ctx, key, func(ctx context.Context, q querier) error {
		return fn(ctx, checkedQuerier{n: n, q: q})
	}))
}

// checkedQuerier is a querier whose errors go through dbError.
type checkedQuerier struct {
	n *Node
	q querier
}

func (c checkedQuerier) exec(ctx context.Context, sql string, args ...any) (int64, error) {
	rows, err := c.q.exec(ctx, sql, args...)
	return rows, c.n.dbError(ctx, err)
}

func (c checkedQuerier) queryRow(ctx context.Context, sql string, args ...any) row {
	return checkedRow{ctx: ctx, n: c.n, r: c.q.queryRow(ctx, sql, args...)}
}

// checkedRow is a row whose Scan error goes through dbError (sql.ErrNoRows
// stays itself).
type checkedRow struct {
	ctx context.Context
	n   *Node
	r   row
}

func (c checkedRow) Scan(dest ...any) error { return c.n.dbError(c.ctx, c.r.Scan(dest...)) }
