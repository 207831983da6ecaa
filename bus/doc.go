// Package bus is a command bus on Watermill: Dispatch sends a command to
// its handler and waits for the outcome, Send sends it and returns.
//
// # Handlers and dispatch
//
// A handler is a function of a command pointer that returns a result:
//
//	b, _ := bus.New(bus.Config{Middleware: []middleware.Middleware{...}})
//	bus.Handle(b, func(ctx context.Context, c *CreateStaff) (StaffID, error) { ... })
//	b.Start(ctx)
//	defer b.Close()
//	id, err := bus.Dispatch[StaffID](ctx, b, &CreateStaff{Email: "ann@x.org"})
//
// Every command runs through a middleware.Runner with the bus's
// middleware, so hooks take claims and locks before the handler and
// release them after it. Dispatch gets back the handler's result (as
// JSON), its error, or the rejection of a halted command, with a zero
// result. Errors cross the wire as data (middleware.MarshalError): a
// rejection stays a *middleware.Rejection, so
// errors.Is(err, middleware.ErrAlreadyTaken) holds on the sender's side
// whichever node handled the command; any other handler error arrives as a
// *middleware.RemoteError with its message.
//
// The bus replies, then acks. A handler error or a rejection is an answer:
// the command is acked, not redelivered, and the sender hears it once. A
// message the bus cannot handle (an unknown command name, an undecodable
// payload) is answered with an invalid rejection (middleware.ErrInvalid),
// or, when nobody waits for it, goes to Config.PoisonTopic or the log; it
// is acked either way.
//
// A Dispatch whose ctx ends returns a *TimeoutError naming the command id;
// it matches ctx's error and middleware.ErrTimeout. Nothing stays pending:
// the reply, if it comes, is dropped. Nor is the command applied later if
// its handler had not started: ctx's deadline travels with the command
// (MetadataDeadline), and a handler does not start past it (nor, in
// process, once ctx is cancelled). A Send's ctx bounds the hand-over only.
//
// # Ids
//
// Command ids are UUIDs (the marshaler's message UUIDs). A command takes
// its correlation and causation ids from ctx (middleware.IDsFromContext)
// and carries them in its metadata ("correlation_id", "causation_id"). A
// handler's ctx carries the ids of its own command, so a command it
// dispatches keeps the correlation id and is caused by it.
//
// # Transports
//
// The default transport is none: with no Publisher (the zero Config), the
// bus works in process, without Watermill Pub/Sub, GoChannel or topics.
// Dispatch and Send encode the command as a message (the same marshaler
// and OnSend), hand it to one of the bus's worker goroutines
// (Config.HandlerConcurrency of them; Send waits for a free one until its
// ctx ends), which runs it through the same middleware.Runner, and the
// reply back, encoded as over a transport: the same results, rejections
// and errors reach the sender. What differs: a command without a handler
// fails at the sender with ErrNoHandler (through a transport it waits for
// a handler, or is answered invalid by a node that does not know it);
// a Dispatch whose ctx is cancelled before its handler started skips it
// (through a transport only the deadline travels); there is no ack, no
// redelivery and no PoisonTopic. A GoChannel is a transport like any
// other: set it as Publisher and Subscriber.
//
// With a Publisher and Subscriber (any Watermill Pub/Sub), commands go to
// one topic per command name (Config.CommandTopic) and replies to one
// topic per bus instance (Config.ReplyTopic of Config.NodeID). Each bus has
// one reply subscription; replies find their waiter by command id. A reply
// to a command this bus sent itself is handed over in process, without the
// transport. Package bus/sqltransport carries commands and replies through
// PostgreSQL and bus/natstransport through NATS JetStream, each command
// handled once across nodes.
//
// Package bus/bustest holds the conformance suite every transport passes
// (bustest.Run: in process, GoChannel, bus/sqltransport, bus/natstransport),
// which you can run against your own Pub/Sub, and a test bus with memory
// stores for an application's integration tests (bustest.NewBus).
//
// # Lifecycle
//
// Handlers are registered before Start (or Run); Dispatch and Send fail
// with ErrNotStarted before it, and with ErrClosed once Close has begun.
// Close stops taking commands, lets running handlers finish, reply and ack
// (cancelling their context after Config.CloseTimeout), ends the
// subscriptions and fails the Dispatch calls still waiting; no goroutine of
// the bus outlives it.
package bus
