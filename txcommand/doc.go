// Package txcommand runs each command in one PostgreSQL transaction that
// holds its claims and commits them with the handler's writes: the
// uniqueness of its fields, their reservations and its idempotency
// outcome. Pick it when the handler's effects live in that database; keep
// the uniqueness and idempotency middleware (session locks beside the
// handler) for handlers whose effects live elsewhere (see
// docs/transactions.md).
//
// The middleware's first round trip sends BEGIN, the xact locks of the
// command's idempotency key and unique values (after this node's turns,
// first come first served), the key's outcome read, and each value's
// lookup and reservation read. The handler runs in the transaction: its
// ctx carries it (postgres.TxFrom), postgres.Serialize nests in it, and
// lockstore.AfterCommit runs effects once it has committed. COMMIT's
// round trip carries the reservations and the outcome. A waiter behind a
// holder that committed gets already_taken from its own lookup; behind one
// that rolled back, it runs.
//
// The contract, under a crash of the node (kill -9) or of its connection
// (pg_terminate_backend) at any step:
//
//	step reached                  the database holds        a repeat of the key gets
//	locks, lookups, handler's     nothing: the session's    a first run
//	writes, COMMIT not sent       end aborts the tx
//	COMMIT sent, not answered     all of it, or nothing     the committed outcome, or a first run
//	COMMIT answered               writes, reservations,     the committed outcome
//	                              outcome
//
// A value is taken for a command exactly when a committed transaction
// wrote it (the lookup) or reserved it: no reservation is ever pending.
// A handler that fails, panics or is halted leaves nothing; a final
// rejection of an idempotent command leaves only its outcome. The sender
// of a command that certainly did not apply gets a rejection matching
// middleware.ErrNotApplied, one whose COMMIT went unanswered
// middleware.ErrOutcomeUnknown, one whose wait for its locks ran past
// Config.ClaimTimeout middleware.ErrTimeout. A node that goes silent
// holds its values on the server at most the lock store's
// Config.StatementTimeout (the transaction's
// idle_in_transaction_session_timeout), plus the server's TCP keepalive
// when the connection itself went silent.
package txcommand
