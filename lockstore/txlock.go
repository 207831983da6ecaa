package lockstore

import "context"

// TxLocker is the transaction-lock contract of the SQL backends
// (lockstore/postgres, lockstore/sqlite): critical sections that run in a
// database transaction holding a key's lock, so that the lock and the
// writes it protects commit or roll back together. Tx is the backend's
// transaction type (pgx.Tx, *sql.Tx), Q what Exclusive hands its fn
// (*pgx.Conn, sqlite.Querier). Each backend's *Store implements it;
// lockstoretest.RunTx is the conformance suite.
//
// The contract, for every implementation:
//
//   - One fn at a time per key, across every node the backend reaches;
//     fn's ctx carries the lock's fencing token (TokenFrom), strictly
//     greater than every token drawn before for the key.
//   - Serialize commits when fn returns nil and rolls back when it returns
//     an error (which comes back as is) or panics (the panic goes on after
//     the rollback), when ctx is done by the time fn returns, and when the
//     store ended the lock before the commit (an error matching
//     ErrLockLost).
//   - Effects registered with AfterCommit inside Serialize run once the
//     outermost transaction has committed and its lock is released, in
//     the order they were registered, and never when it rolls back.
//   - Nesting: inside a transaction ctx carries (Serialize's, or the
//     caller's own attached with WithTx), Serialize and Exclusive run fn
//     at once in a savepoint of it: the same key again reuses its lock and
//     token, another key gets a token of its own. When the nested fn fails
//     or panics, the transaction rolls back to the savepoint: fn's writes
//     and the effects registered inside it are dropped, whatever the
//     enclosing fn does next. The outermost fn decides the commit.
//   - Bad input fails at once without calling fn: a nil fn, an invalid key
//     (an error matching ErrInvalidKey); so does a closed store (ErrClosed).
type TxLocker[Tx, Q any] interface {
	// Serialize runs fn in a transaction that holds key's lock, and
	// commits it when fn returns nil (see the contract above).
	Serialize(ctx context.Context, key Key, fn func(ctx context.Context, tx Tx) error) error
	// Exclusive runs fn holding key's lock outside any transaction, for a
	// job whose writes each commit, and run their AfterCommit effects, by
	// themselves; fn's ctx is cancelled when the lock is lost, and the
	// error then matches ErrLockLost. Inside a transaction ctx carries, it
	// is Serialize: fn gets that transaction as q.
	Exclusive(ctx context.Context, key Key, fn func(ctx context.Context, q Q) error) error
	// WithTx returns a ctx that carries tx, a transaction the caller opened
	// on the store's database and will end: Serialize and Exclusive with
	// that ctx run inside tx, as nested calls do, and leave the commit to
	// the caller. AfterCommit inside the ctx registers into the caller's
	// transaction: the caller calls afterCommit after tx commits, which
	// runs them, and does not call it on rollback.
	WithTx(ctx context.Context, tx Tx) (_ context.Context, afterCommit func())
}
