// Package bustest tests buses: a conformance suite that every transport of
// package bus passes (Run), and a bus with memory stores for the
// integration tests of an application that uses claimbus (NewBus, Reset,
// RequireRejection), as River's rivertest serves River's users.
//
// # The conformance suite
//
// Run checks, against a Harness that makes the nodes of one backend, the
// behaviour a transport must keep for the bus on it; the same checks pass
// in process (no Publisher), on a GoChannel, on bus/sqltransport and on
// bus/natstransport:
//
//	func TestConformance(t *testing.T) {
//		bustest.Run(t, bustest.Harness{
//			MultiNode: true, Durable: true, // what the transport promises
//			NewBackend: func(t testing.TB) bustest.Backend {
//				broker := startBroker(t) // closed with t.Cleanup
//				return bustest.Backend{Node: func(t testing.TB, cfg bus.Config, o bustest.NodeOptions) bus.Config {
//					cfg.Publisher, cfg.Subscriber = broker.PubSub(t, o.ID)
//					return cfg
//				}}
//			},
//		})
//	}
//
// Every transport must keep, from one node to itself and from one node to
// another on the same backend:
//
//   - Dispatch gets the handler's result; a handler error, a panic of the
//     handler or of its result's encoder as a *middleware.RemoteError with
//     its message; a halted command's *middleware.Rejection with its code,
//     field and message; an invalid rejection for a command that cannot be
//     decoded (or whose decoder panics); bus.ErrUndecodableReply for a
//     result the sender cannot decode; and nothing stays pending;
//   - many Dispatch calls at once each get their own outcome (run with
//     -race);
//   - Send hands a command over and returns; nobody hears its outcome;
//   - a Dispatch whose ctx ends returns a *bus.TimeoutError naming the
//     command, matching the ctx's error and middleware.ErrTimeout; the late
//     reply is dropped; a handler that has not started by the deadline
//     does not start, a ctx already done sends nothing, and a Send's ctx
//     bounds only the hand-over;
//   - a handler error is an answer: heard once, acked, never delivered
//     again;
//   - a command nobody handles is answered with an invalid rejection, or
//     sent to Config.PoisonTopic when nobody waits, as a message that is no
//     command or cannot be decoded is; each is acked;
//   - correlation and causation ids travel with the command, and OnSend's
//     metadata reaches the handling node's middleware;
//   - the lifecycle errors (bus.ErrNotStarted, bus.ErrStarted,
//     bus.ErrClosed, bus.ErrDuplicateHandler, bus.ErrNilCommand); Close
//     lets running handlers finish and reply, cancels them after
//     CloseTimeout, fails a Dispatch still waiting with bus.ErrClosed, and a
//     second Close waits for the first; a handler that ends its goroutine
//     (runtime.Goexit) answers with an error and frees its slot;
//   - every command message a node's subscriptions hand out is acked and
//     never nacked, and where a check knows how many it sent, none is
//     delivered twice up to the acks (the suite wraps the node's Subscriber
//     to see it).
//
// And what a transport may promise, each checked only when the Harness
// declares it (a capability it does not declare is not tested, and Run
// says so with t.Log):
//
//   - MultiNode: several nodes share each command topic, each command
//     handled once, by one of them, every node taking some;
//   - Durable: a command sent while no node subscribes waits for the first;
//   - Redelivery: a command left unacked past the transport's ack deadline
//     (NodeOptions.RedeliverAfter) is delivered again, to any node, and the
//     sender gets the reply of that run (at least once);
//   - LossNotifier: the ReplySubscriber is a bus.LossNotifier, and a
//     Dispatch waiting when the transport loses its connection
//     (Backend.LoseConnection) returns at once with an error matching
//     bus.ErrOutcomeUnknown and middleware.ErrUnavailable, whose rejection
//     names no server; Dispatch works again once the transport is back;
//   - Inspects: Backend.Unacked counts a topic's unacked messages, so the
//     suite checks that every command, reply and poison message it handles
//     is acked on the backend too (deleted from its queue).
//
// Run's checks are parallel subtests, each on a backend of its own from
// Harness.NewBackend; Harness.Only restricts them to some, for a costly
// backend. Run it from a package whose TestMain checks that no goroutine
// leaks (goleak.VerifyTestMain, as the packages of this module do): every
// bus the suite starts is closed before its test ends, before the
// transport, so a leak is the transport's or the bus's.
//
// # Integration tests of an application
//
// NewBus starts a bus with a lockstore.Memory and a claim store in memory
// (Stores), with the middleware Options.Middleware builds on them (the
// uniqueness middleware, Lock, idempotency) and the handlers
// Options.Handlers registers; it closes the bus and the stores when the
// test ends. TestBus.Reset forgets every lock, claim, reservation and
// idempotency outcome between tests that share a bus, and
// RequireRejection fails a test unless an error is a rejection with a
// given code and field.
package bustest
