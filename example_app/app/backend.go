package app

import (
	"context"

	"github.com/claimbus/claimbus/claimstore"
	"github.com/claimbus/claimbus/lockstore"
)

// Backend is the database a node's handlers write to, with the lock store
// that coordinates them: SQLite for the embedded demo (SQLiteBackend),
// PostgreSQL for nodes that share one database (PostgresBackend). The
// handlers are written once against it; their SQL uses $1-style
// placeholders, which both databases read.
type Backend interface {
	// Locker takes the claims of the Uniqueness middleware and the locks
	// of the Lock middleware.
	Locker() lockstore.Locker
	// Name is "sqlite" or "postgres".
	Name() string
	// Ping checks that the database answers.
	Ping(ctx context.Context) error

	// claims returns the durable store of the reservations and the
	// idempotency outcomes, in the backend's database.
	claims(ctx context.Context) (claimstore.Store, error)
	// db runs statements outside any transaction: the lookups.
	db() querier
	// tx runs fn in a transaction, committed when fn returns nil.
	tx(ctx context.Context, fn txFunc) error
	// serialize runs fn in a transaction that holds key's lock: one fn at
	// a time per key, on every node. Both
	// backends have it from txLocking, on their store's
	// lockstore.TxLocker.
	serialize(ctx context.Context, key lockstore.Key, fn txFunc) error
	// isUniqueViolation reports whether err is a unique index refusing a
	// row: the backstop under the claims.
	isUniqueViolation(err error) bool
	// isUnavailable reports whether err, from a statement run under ctx,
	// means that the database cannot be reached now (it is down,
	// restarting, dropped the session, refuses connections): an outage
	// that a retry may get past, answered 503. A timeout of ctx's own is
	// not one.
	isUnavailable(ctx context.Context, err error) bool
	// isBusy reports whether err, one isUnavailable accepts, means that
	// the database is up but other writers kept it past the wait for its
	// write lock: an overload, answered 503 saying so.
	isBusy(err error) bool
	// held lists the locks and claims held now, by every node of the
	// database (lockstore.Store.Held).
	held(ctx context.Context) ([]lockstore.Holder, error)
	// holds reports whether h, an entry of held, is the lock of k: by
	// key, or by lock id for another node's lock on PostgreSQL.
	holds(h lockstore.Holder, k lockstore.Key) bool
	// isBadValue reports whether err is the database refusing a value
	// (bytes its encoding cannot hold, a value too long to index): the
	// backstop under the validation, which keeps such values out.
	isBadValue(err error) bool
}

// txLocking is a backend's serialize on its store's transaction locks
// (lockstore.TxLocker, which both lock stores implement): Tx is the
// store's transaction type, and wrap makes the handlers' querier of one.
type txLocking[Tx, Q any] struct {
	locker lockstore.TxLocker[Tx, Q]
	wrap   func(Tx) querier
}

// serialize runs fn in the locker's Serialize, on its transaction.
func (l txLocking[Tx, Q]) serialize(ctx context.Context, key lockstore.Key, fn txFunc) error {
	return l.locker.Serialize(ctx, key, func(ctx context.Context, tx Tx) error {
		return fn(ctx, l.wrap(tx))
	})
}

// txFunc is the work of one transaction.
type txFunc func(ctx context.Context, q querier) error

// querier runs SQL on a database or in a transaction.
type querier interface {
	// exec runs a statement and returns the number of rows it changed.
	exec(ctx context.Context, sql string, args ...any) (int64, error)
	// queryRow runs a query that returns at most one row.
	queryRow(ctx context.Context, sql string, args ...any) row
}

// row is one row of a result, as *sql.Row and pgx.Row both are: Scan
// returns an error matching sql.ErrNoRows when there is none (pgx.ErrNoRows
// matches it).
type row interface {
	Scan(dest ...any) error
}
