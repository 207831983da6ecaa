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
// Claims and locks do not travel here: the uniqueness and lock middleware
// keep them in their lock store (PostgreSQL for several nodes).
//
// # Streams, subjects and consumers
//
// Every message lives in one stream (Config.Stream, created by New with
// file storage) that captures SubjectPrefix.> and has work-queue
// retention: a message is deleted once it is acked. A topic's messages go
// to its subject, SubjectPrefix and the topic with every byte NATS would
// refuse escaped (Transport.Subject: "command.commands.CreateStaff" is
// "claimbus.command.commands.CreateStaff", "reply.node:1" is
// "claimbus.reply.node%3A1"), a mapping that keeps distinct topics
// distinct. Each topic has one durable push consumer (Transport.ConsumerName),
// created by the first node that subscribes to it, filtered on its subject
// and delivering to a queue group: every node's subscription of a command
// topic joins that group, and each command is handled by one node.
// Replies go to the reply topic of the sending node (bus.Config.ReplyTopic
// names its NodeID), whose consumer only that node subscribes to. The
// nodes of one stream must agree on AckWait and MaxAckPending: a node
// whose settings differ from the stream's or a consumer's fails New or
// bus.Start with ErrConfigMismatch rather than changing them for the
// others.
//
// # Delivery
//
// At least once. A publish returns once the stream has stored the message
// (the server's acknowledgement). The server pushes a topic's messages to
// the nodes of its queue group, at most MaxAckPending unacked at a time;
// the bus handles a command, publishes its reply, then acks it, and the
// ack waits for the server's confirmation. So a command is handled once
// unless its ack is lost: a message unacked after AckWait (a handler slower
// than that, a node that hung or died, an ack that did not reach the
// server) is delivered again, to any node. A handler's error and a
// rejection are answers: they are acked, not delivered again. A nacked
// message, and one that a closing subscription had not settled, is
// delivered again at once. Keep AckWait above the slowest handler plus the
// time a message can wait on a busy node (see Config.MaxAckPending), and
// let the uniqueness middleware and the database's unique indexes absorb
// the rare second delivery.
//
// A publish that failed may still have been stored, when the server's
// acknowledgement was lost on the way: the command may run although its
// sender got an error, as after a bus.TimeoutError.
//
// A message whose headers watermill-nats cannot decode (from a client that
// is not a bus) is terminated: logged, never delivered again.
//
// # Ordering
//
// None to rely on. A topic's messages are delivered in the order the
// stream stored them, but to several nodes, each handling many at once,
// and a message delivered again comes after later ones.
//
// # Durability
//
// The stream and its consumers live on the server, on disk by default
// (MemoryStorage keeps them in memory), and survive a server restart with
// their messages: a command stored while no node handles its topic waits
// for one. A single server syncs its files every two minutes by default
// (its sync_interval): a crash of the machine can lose what was stored
// since; run a NATS cluster with Replicas 3 where that matters. A node's
// reply consumer, named from its NodeID, stays when the node goes away:
// give nodes stable ids, and remove the consumers of retired ones (nats
// consumer rm). With work-queue retention, replies published to a node
// that never comes back stay in the stream.
//
// # When NATS is down or unreachable
//
// The transport owns its connection and reconnects for as long as it is
// open, every ReconnectWait, to any server of the URL list. It keeps no
// reconnect buffer: while the connection is down, Publish fails at once
// (and within RequestTimeout when it races the loss of the connection, or
// when a server does not answer) with an error matching
// middleware.ErrUnavailable, so Dispatch and Send fail with it, and a
// sender that maps rejections to HTTP answers 503. New fails the same way
// when no server answers. Acks that cannot be sent are logged, and their
// messages delivered again after AckWait. Subscriptions survive: when the
// connection is back (the same server restarted with its store, or another
// server of the cluster), the durable consumers deliver again, from where
// they were. A server that comes back without the stream (an empty store,
// memory storage) leaves publishes failing with ErrUnavailable until the
// nodes restart and New creates it anew.
//
// # Closing
//
// Close the bus, then the transport. The bus's Close lets running
// handlers reply and ack; the transport's Close then ends the
// subscriptions, sends the acks and naks still buffered and closes the
// connection. A message a subscription handed over and that nobody acked
// by then is handed back (nacked with a delay of 250 ms, so that the
// closing subscription has left the queue group): another node gets it
// then, long before AckWait.
//
// # Handlers
//
// Handlers run on the bus's workers (bus.Config.HandlerConcurrency); the
// transport only hands messages over, so a node handles many commands of
// one topic at once. A handler may dispatch other commands and wait for
// them: nothing of the transport is held while it runs.
package natstransport
