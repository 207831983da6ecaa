package txcommand

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/claimbus/claimbus/claimstore"
	cspostgres "github.com/claimbus/claimbus/claimstore/postgres"
	"github.com/claimbus/claimbus/internal/claimtx"
	"github.com/claimbus/claimbus/lockstore"
	"github.com/claimbus/claimbus/lockstore/postgres"
)

// Backend is the database the commands' transactions run on, with its
// lock store and its claim store: Postgres or SQLite makes one. Only its
// I/O differs; the middleware is the same on both.
type Backend interface {
	// check reports what is missing; needClaims when a rule reserves or
	// idempotency is set.
	check(needClaims bool) error
	// begin opens the transaction holding keys' locks (wait bounds the
	// wait), reads r's outcome and looks up r's checks, and opens the
	// savepoint when r has a key.
	begin(ctx context.Context, keys []lockstore.Key, wait time.Duration, r *run) (txn, context.Context, error)
	// reservations is the claim store, for Sweep.
	reservations() claimstore.Reservations
	// shown runs lookup for id outside any transaction.
	shown(ctx context.Context, lookup, id string) (bool, error)
}

// txn is one command's open transaction.
type txn interface {
	// commit writes w and commits: an error means nothing committed,
	// unless it matches postgres.ErrOutcomeUnknown.
	commit(ctx context.Context, w writes) error
	rollback() error
}

// writes is what a command's commit writes.
type writes struct {
	undo      bool // roll back to the savepoint first (a final rejection)
	reserve   []lockstore.Key
	owner     string
	key       lockstore.Key // the outcome's, zero for none
	outcome   claimstore.Outcome
	retention time.Duration
}

// Postgres returns the backend on PostgreSQL: locks is the lock store on
// the handler's database (the transaction takes a connection of its pool,
// its node-local turns and its lock ids), claims keeps the reservations
// and outcomes on the same database (nil when no rule reserves and
// idempotency is not set). The handler finds the pgx.Tx with
// postgres.TxFrom.
func Postgres(locks *postgres.Store, claims *cspostgres.Store) Backend {
	return pgBackend{locks: locks, claims: claims, claimsTx: claimtx.PostgresOf(claims).(pgClaims)}
}

// pgClaims queues a claimstore/postgres Store's statements on a batch that
// the caller sends in its own transaction. Their callbacks run when the
// batch's results are read.
type pgClaims interface {
	// QueueOutcome queues the read of key's outcome whose retention has
	// not passed into o, setting found when there is one.
	QueueOutcome(b *pgx.Batch, key lockstore.Key, o *claimstore.Outcome, found *bool)
	// QueueSaveOutcome queues the write of o under key for retention,
	// replacing any outcome stored there.
	QueueSaveOutcome(b *pgx.Batch, key lockstore.Key, o claimstore.Outcome, retention time.Duration)
	// QueueLookup queues, as one statement, lookup (SQL given key.ID as
	// $1, returning a row when the value is taken) into taken and the read
	// of the owner of key's reservation into owner, left empty when it has
	// none.
	QueueLookup(b *pgx.Batch, key lockstore.Key, lookup string, taken *bool, owner *string)
	// QueueReserve queues the insert of owner's confirmed reservation of
	// key. The table's primary key is the guarantee: when the value is
	// reserved already, the statement fails and so does the transaction.
	QueueReserve(b *pgx.Batch, key lockstore.Key, owner string)
}

type pgBackend struct {
	locks    *postgres.Store
	claims   *cspostgres.Store
	claimsTx pgClaims
}

func (b pgBackend) check(needClaims bool) error {
	return checkStores(b.locks == nil, needClaims && b.claims == nil, "postgres")
}

// checkStores is the error of a backend whose lock store is missing, or
// its claim store when needed.
func checkStores(noLocks, noClaims bool, name string) error {
	var errs []error
	if noLocks {
		errs = append(errs, errors.New("txcommand: Config.Backend's lock store is nil (give the lockstore/"+name+" store on the handler's database)"))
	}
	if noClaims {
		errs = append(errs, errors.New("txcommand: Config.Backend's claim store is nil, and a rule reserves or Idempotency is set (give the claimstore/"+name+" store on the same database)"))
	}
	return errors.Join(errs...)
}

// begin sends everything in the first round trip of postgres.Begin.
func (b pgBackend) begin(ctx context.Context, keys []lockstore.Key, wait time.Duration, r *run) (txn, context.Context, error) {
	var batch pgx.Batch
	if r.key != (lockstore.Key{}) {
		b.claimsTx.QueueOutcome(&batch, r.key, &r.o, &r.found)
	}
	for i := range r.checks {
		c := &r.checks[i]
		if c.rule.reserve {
			b.claimsTx.QueueLookup(&batch, c.key, c.rule.lookup, &c.taken, &c.owner)
			continue
		}
		batch.Queue(c.rule.lookup, c.key.ID).Query(func(rows pgx.Rows) (err error) {
			c.taken, err = anyRow(rows, nil)
			return err
		})
	}
	if r.key != (lockstore.Key{}) {
		batch.Queue("savepoint " + savepoint)
	}
	t, tctx, err := postgres.Begin(ctx, b.locks, keys, wait, &batch)
	if err != nil {
		return nil, nil, err
	}
	return pgTxn{t, b.claimsTx}, tctx, nil
}

func (b pgBackend) reservations() claimstore.Reservations { return b.claims }

func (b pgBackend) shown(ctx context.Context, lookup, id string) (bool, error) {
	return anyRow(b.locks.Pool().Query(ctx, lookup, id))
}

// anyRow reports whether rows, the answer of a lookup, has a row.
func anyRow(rows pgx.Rows, err error) (bool, error) {
	if err != nil {
		return false, err
	}
	found := rows.Next()
	rows.Close()
	return found, rows.Err()
}

type pgTxn struct {
	t      *postgres.Txn
	claims pgClaims
}

// commit sends w in the round trip of COMMIT.
func (t pgTxn) commit(ctx context.Context, w writes) error {
	var batch pgx.Batch
	if w.undo {
		batch.Queue("rollback to savepoint " + savepoint)
	}
	for _, k := range w.reserve {
		t.claims.QueueReserve(&batch, k, w.owner)
	}
	if w.key != (lockstore.Key{}) {
		t.claims.QueueSaveOutcome(&batch, w.key, w.outcome, w.retention)
	}
	return t.t.Commit(ctx, &batch)
}

func (t pgTxn) rollback() error { return t.t.Rollback() }
