// Package sqltransport carries the commands and replies of a bus through
// PostgreSQL, with watermill-sql and a pgxpool, so that several nodes
// share one queue per command.
//
//	t, err := sqltransport.New(ctx, pool, sqltransport.Config{NodeID: "node-a"})
//	defer t.Close()
//	b, err := bus.New(t.BusConfig(bus.Config{Middleware: mws}))
//	defer b.Close() // before t.Close
//
// Each topic is a table; a subscription takes the oldest row nobody holds
// (SKIP LOCKED) and deletes it when the message is acked, so each command
// is handled by one node. A handler writes through its own pool or
// transaction, never the subscription's, so that its writes commit before
// the after hooks release its claims.
//
// While the database cannot be reached, Publish fails with an error
// matching middleware.ErrUnavailable (so a Dispatch does too), whose
// rejection says to try again. When the LISTEN connection drops (or, with
// DisableNotify, when a reply subscription's query fails for want of a
// connection), every Dispatch of the buses on this transport that waits
// for a reply fails at once with an error matching
// middleware.ErrUnavailable and middleware.ErrOutcomeUnknown, instead of waiting
// until its deadline for a reply that a crashed server may have lost.
//
// docs/bus.md#bussqltransport describes delivery, latency, handlers and
// outages.
package sqltransport
