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
//   - A subscription leases the oldest rows nobody holds (SKIP LOCKED), up
//     to 64, no more than its consumer lately took at once; those its busy
//     consumer cannot take within 10ms go back. It hands a message over
//     only while its lease lasts, and renews the lease until the ack.
//   - An acked message is deleted; a nacked one, or one still held when
//     its subscription ends, is handed back at once; neither touches a row
//     another subscription has leased since.
//   - A node that dies or cannot renew (cut off from the database) loses
//     its leases when they end, a third of AckDeadline and at most 5s: their
//     messages go to another node, plus its PollInterval, even if handlers
//     of the first node still run them.
//   - A message unacked AckDeadline after its hand-over is delivered again,
//     as is one leased by a fetch cut short by its subscription's end, when
//     its lease ends. Else a message is handed to one subscription at a
//     time; delivery is at least once, in no promised order.
//
// No connection is held while a handler runs; it writes through its own
// pool or transaction, committed before the after hooks release its claims.
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
// docs/bus.md#bussqltransport has delivery, latency, handlers and outages.
package sqltransport
