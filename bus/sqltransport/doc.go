// Package sqltransport carries the commands and replies of a bus through
// PostgreSQL and a pgxpool, so that several nodes share one queue per
// command.
//
//	t, err := sqltransport.New(ctx, pool, sqltransport.Config{NodeID: "node-a"})
//	defer t.Close()
//	b, err := bus.New(t.BusConfig(bus.Config{Middleware: mws}))
//	defer b.Close() // before t.Close
//
// Each topic is a table, a message a row. The contract:
//
//   - A message is handed to one subscription at a time: a query leases up
//     to 64 of the oldest rows nobody holds (SKIP LOCKED) to the node until
//     claimed_until, and the node renews the lease while its handler runs.
//   - An acked message is deleted; a nacked one, or one still held when
//     its subscription ends, is handed back at once.
//   - A node that dies (or loses the database) renews nothing: its
//     messages go to another node when their lease ends, a third of
//     AckDeadline and at most 5s, plus that node's PollInterval.
//   - A message unacked after AckDeadline is no longer renewed and is
//     delivered again: delivery is at least once, in no promised order.
//
// No connection is held while a handler runs, and the handler's writes go
// through its own pool or transaction, committed before the after hooks
// release its claims.
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
