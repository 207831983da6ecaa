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
// sender's deadline (metadata claimbus_deadline, by the receiving node's clock)
// has passed when a node takes it is terminated: not handled, not
// answered, never delivered again. So a dead node's command is answered
// in time when AckWait plus its handler fit in what is left of its
// deadline, and is not run late otherwise. While NATS is down, Publish
// fails at once with an error matching middleware.ErrUnavailable. Claims
// and locks do not travel here: the uniqueness and lock middleware keep
// them in their lock store.
//
// A topic's messages go to the subject SubjectPrefix, a dot, and the
// topic's dot-separated parts with every byte other than a letter, a
// digit, - or _ written as %XX (upper-case hex) and an empty part written
// as %: "command.commands.CreateStaff" is
// "claimbus.command.commands.CreateStaff", "reply.node:1" is
// "claimbus.reply.node%3A1". Distinct topics have distinct subjects. Each
// command topic has one durable consumer, whose name is also the queue
// group of every node's subscription: DurablePrefix, _, the topic with
// every byte other than a letter, a digit, - or _ written as _ (cut to 96
// bytes), _, and 12 hex digits of the topic's SHA-256.
//
// docs/bus.md#busnatstransport describes streams, delivery, ordering,
// durability and outages.
package natstransport
