// Package natstransport carries the commands and replies of a bus through
// NATS JetStream, with watermill-nats (its pkg/nats Publisher and
// Subscriber with JetStream on), so that several nodes share one queue per
// command. It is the broker counterpart of bus/sqltransport.
//
//	t, err := natstransport.New(ctx, "nats://127.0.0.1:4222", natstransport.Config{NodeID: "node-a"})
//	defer t.Close()
//	b, err := bus.New(t.BusConfig(bus.Config{Middleware: mws}))
//	defer b.Close() // before t.Close
//
// Delivery is at least once. A node renews every command it holds (an
// in-progress ack every AckWait/3) until the bus acks it, so a handler may
// run longer than AckWait. A node that dies or loses its connection stops
// renewing: the server delivers its commands again, to another node,
// at most AckWait (default 5 s) after its last renewal. A command whose
// sender's deadline (bus.MetadataDeadline, by the receiving node's clock)
// has passed when a node takes it is terminated: not handled, not
// answered, never delivered again. So a dead node's command is answered
// in time when AckWait plus its handler fit in what is left of its
// deadline, and is not run late otherwise. While NATS is down, Publish
// fails at once with an error matching middleware.ErrUnavailable. Claims
// and locks do not travel here: the uniqueness and lock middleware keep
// them in their lock store.
//
// docs/bus.md#busnatstransport describes streams, delivery, ordering,
// durability and outages.
package natstransport
