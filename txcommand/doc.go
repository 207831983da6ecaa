// Package txcommand runs each command in one transaction, on PostgreSQL
// or SQLite (Config.Backend), that holds its claims and commits them with
// the handler's writes: the uniqueness of its fields, their reservations
// and its idempotency outcome. Pick it when the handler's effects live in
// that database; keep the uniqueness and idempotency middleware for
// handlers whose effects live elsewhere (see docs/transactions.md).
//
// The middleware takes the locks of the command's idempotency key and
// unique values (first come first served), reads the key's outcome and
// looks each value and its reservation up, all in the transaction: on
// PostgreSQL in its first round trip, after this node's turns. The
// handler runs in the transaction: its ctx carries it (TxFrom of
// lockstore/postgres or lockstore/sqlite), the lock store's Serialize
// nests in it, and
// lockstore.AfterCommit runs effects once it has committed. COMMIT comes
// with the reservations and the outcome. A waiter behind a holder that
// committed gets already_taken from its own lookup; behind one that
// rolled back, it runs.
//
// Under a crash of the node (kill -9) or of its connection at any step:
//
//	step reached                  the database holds        a repeat of the key gets
//	before COMMIT                 nothing                   a first run
//	COMMIT sent, not answered     all of it, or nothing     the committed outcome, or a first run
//	COMMIT answered               writes, reservations,     the committed outcome
//	                              outcome
//
// On SQLite a COMMIT is answered or fails: one that fails is not_applied.
//
// A value is taken exactly when a committed transaction wrote it (the
// lookup) or reserved it. A handler that fails, panics or is halted
// leaves nothing; a final rejection of an idempotent command leaves only
// its outcome. A command that certainly did not apply is rejected
// matching middleware.ErrNotApplied, one whose COMMIT to PostgreSQL went
// unanswered middleware.ErrOutcomeUnknown, one whose wait for its locks
// ran past Config.ClaimTimeout middleware.ErrTimeout. A PostgreSQL node
// that goes silent holds its values on the server at most the lock
// store's Config.StatementTimeout, plus the TCP keepalive.
package txcommand
