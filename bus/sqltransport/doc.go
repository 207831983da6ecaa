// Package sqltransport carries the commands and replies of a bus through
// PostgreSQL, with watermill-sql and a pgxpool, so that several nodes
// share one queue per command.
//
//	t, err := sqltransport.New(ctx, pool, sqltransport.Config{NodeID: "node-a"})
//	defer t.Close()
//	b, err := bus.New(t.BusConfig(bus.Config{Middleware: mws}))
//	defer b.Close() // before t.Close
//
// # Delivery
//
// Each topic is a table ("claimbus_" and the topic), created on first use
// by whichever node needs it first, behind an advisory lock, so that
// several nodes may start at once. These tables are not versioned
// migrations like the stores' (their names come from the topics; see
// docs/postgres-production.md, "Migrations"). A message is a row. A subscription
// takes the oldest row nobody holds (SELECT ... FOR UPDATE SKIP LOCKED, in
// a transaction), hands the message over, and deletes the row when the
// message is acked, in the same transaction. So every node's subscription
// of a command topic shares its queue and each command is handled by one
// node; replies go to a table of the sending node's own (its reply topic
// names its NodeID), which only that node reads.
//
// This is Watermill's PostgreSQL queue schema, with SKIP LOCKED and
// without the snapshot horizon of its default schema: that schema delivers
// nothing newer than the oldest transaction still running, and a command
// subscription's transaction runs as long as its handler does, so a
// handler that dispatched a command and waited for its reply would wait
// for itself.
//
// # Latency
//
// Every table has an AFTER INSERT trigger that notifies the channel
// NotifyChannel with the table's name; it fires when the inserting
// transaction commits. The transport LISTENs on one connection of its own
// and wakes the subscriptions of that table at once, so a reply does not
// wait on a poll. Polling (PollInterval, ReplyPollInterval) stays as a
// backstop, and is all there is with DisableNotify, where replies are
// polled every 10 ms by default.
//
// # Handlers and transactions
//
// The bus replies, then acks, and the ack commits the subscription's
// transaction. A handler must therefore not write through that
// transaction (watermill-sql's TxFromContext): its writes would commit
// after the reply, after the after hooks released its claims, and would
// not roll back when it fails (watermill-sql does not roll back on nack).
// The bus does not give handlers the message's context, so
// sql.TxFromContext finds nothing there: a handler writes through its own
// pool or transaction, which commits before it returns, and so before the
// after hooks release its claims. Keep handlers on a pool of their own, or
// size the transport's pool for them: each command subscription holds a
// connection while its handler runs.
//
// A subscription hands over one message at a time; a node handles the
// commands of one topic one after the other, and several nodes share the
// load. A message unacked after AckDeadline is handed out again: keep it
// above the slowest handler.
//
// # Outages
//
// While the database cannot be reached, Publish (and so bus.Dispatch and
// Bus.Send) fails at once with an error matching middleware.ErrUnavailable:
// a rejection whose message says to try again and names no server, with
// the driver's error wrapped beside it for logs. The subscriptions keep
// retrying (RetryInterval) and resume on their own when the database is
// back.
package sqltransport
