package txcommand

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/claimbus/claimbus/claimstore"
	cssqlite "github.com/claimbus/claimbus/claimstore/sqlite"
	"github.com/claimbus/claimbus/internal/claimtx"
	"github.com/claimbus/claimbus/lockstore"
	locksqlite "github.com/claimbus/claimbus/lockstore/sqlite"
)

// SQLite returns the backend on SQLite: locks is the lock store on the
// handler's database file (the transaction holds its in-process locks
// and its write gate), claims keeps the reservations and outcomes in the
// same file (nil when no rule reserves and idempotency is not set). The
// handler finds the *sql.Tx with lockstore/sqlite.TxFrom.
func SQLite(locks *locksqlite.Store, claims *cssqlite.Store) Backend {
	return sqliteBackend{locks: locks, claims: claims, claimsTx: claimtx.SQLiteOf(claims).(sqliteClaims)}
}

// sqliteClaims runs a claimstore/sqlite Store's statements in tx, a transaction
// of the caller on the store's database. They bypass the store's write
// gate: tx holds SQLite's write lock already.
type sqliteClaims interface {
	// Outcome reads key's outcome whose retention has not passed.
	Outcome(ctx context.Context, tx *sql.Tx, key lockstore.Key) (claimstore.Outcome, bool, error)
	// SaveOutcome writes o under key for retention, replacing any outcome
	// stored there.
	SaveOutcome(ctx context.Context, tx *sql.Tx, key lockstore.Key, o claimstore.Outcome, retention time.Duration) error
	// Lookup runs lookup (SQL given key.ID as $1, returning a row when the
	// value is taken) into taken, and reads the owner of key's
	// reservation, empty when it has none.
	Lookup(ctx context.Context, tx *sql.Tx, key lockstore.Key, lookup string) (taken bool, owner string, err error)
	// Reserve inserts owner's confirmed reservation of key. When the
	// value is reserved already, the statement fails.
	Reserve(ctx context.Context, tx *sql.Tx, key lockstore.Key, owner string) error
}

type sqliteBackend struct {
	locks    *locksqlite.Store
	claims   *cssqlite.Store
	claimsTx sqliteClaims
}

func (b sqliteBackend) check(needClaims bool) error {
	return checkStores(b.locks == nil, needClaims && b.claims == nil, "sqlite")
}

// begin runs the reads one after the other in the transaction of
// lockstore/sqlite.Begin.
func (b sqliteBackend) begin(ctx context.Context, keys []lockstore.Key, wait time.Duration, r *run) (txn, context.Context, error) {
	t, tctx, err := locksqlite.Begin(ctx, b.locks, keys, wait)
	if err != nil {
		return nil, nil, err
	}
	if err := b.read(tctx, t.Tx(), r); err != nil {
		return nil, nil, errors.Join(err, t.Rollback())
	}
	return sqliteTxn{t, b.claimsTx}, tctx, nil
}

func (b sqliteBackend) read(ctx context.Context, tx *sql.Tx, r *run) error {
	var err error
	if r.key != (lockstore.Key{}) {
		if r.o, r.found, err = b.claimsTx.Outcome(ctx, tx, r.key); err != nil {
			return err
		}
	}
	for i := range r.checks {
		c := &r.checks[i]
		if c.rule.reserve {
			c.taken, c.owner, err = b.claimsTx.Lookup(ctx, tx, c.key, c.rule.lookup)
		} else {
			c.taken, err = exists(ctx, tx, c.rule.lookup, c.key.ID)
		}
		if err != nil {
			return fmt.Errorf("lookup of %s: %w", c.key, err)
		}
	}
	if r.key != (lockstore.Key{}) {
		_, err = tx.ExecContext(ctx, "savepoint "+savepoint)
	}
	return err
}

// exists runs lookup for id with q.
func exists(ctx context.Context, q interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}, lookup, id string) (bool, error) {
	var taken bool
	err := q.QueryRowContext(ctx, "SELECT EXISTS ("+lookup+")", id).Scan(&taken)
	return taken, err
}

func (b sqliteBackend) reservations() claimstore.Reservations { return b.claims }

func (b sqliteBackend) shown(ctx context.Context, lookup, id string) (bool, error) {
	return exists(ctx, b.locks.DB(), lookup, id)
}

type sqliteTxn struct {
	t      *locksqlite.Txn
	claims sqliteClaims
}

// commit runs w's statements, then COMMIT. A failed COMMIT on a local
// file has rolled back: nothing committed.
func (t sqliteTxn) commit(ctx context.Context, w writes) error {
	if err := t.write(ctx, w); err != nil {
		return errors.Join(fmt.Errorf("txcommand: not committed: %w", err), t.t.Rollback())
	}
	return t.t.Commit()
}

func (t sqliteTxn) write(ctx context.Context, w writes) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	tx := t.t.Tx()
	if w.undo {
		if _, err := tx.ExecContext(ctx, "rollback to savepoint "+savepoint); err != nil {
			return err
		}
	}
	for _, k := range w.reserve {
		if err := t.claims.Reserve(ctx, tx, k, w.owner); err != nil {
			return err
		}
	}
	if w.key != (lockstore.Key{}) {
		return t.claims.SaveOutcome(ctx, tx, w.key, w.outcome, w.retention)
	}
	return nil
}

func (t sqliteTxn) rollback() error { return t.t.Rollback() }
