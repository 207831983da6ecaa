// Package bus is a command bus on Watermill: Dispatch sends a command to
// its handler and waits for the outcome, Send sends it and returns.
//
//	b, err := bus.New(bus.Config{Middleware: []middleware.Middleware{...}})
//	err = bus.Handle(b, func(ctx context.Context, c *CreateStaff) (StaffID, error) { ... })
//	err = b.Start(ctx)
//	defer b.Close()
//	id, err := bus.Dispatch[StaffID](ctx, b, &CreateStaff{Email: "ann@x.org"})
//
// Every command runs through a middleware.Runner with the bus's middleware,
// so hooks take claims and locks before the handler and release them after
// it. Dispatch returns the handler's result, its error, or the rejection of
// a halted command; a rejection stays a *middleware.Rejection across nodes,
// so errors.Is works on the sender's side. A handler error or a rejection
// is an answer: the command is acked, not redelivered. A Dispatch whose ctx
// ends returns an error matching middleware.ErrTimeout, and its deadline travels with the command,
// so a handler never starts past it.
//
// With no Publisher the bus runs in process, on its own workers; with a
// Watermill Publisher and Subscriber (bus/sqltransport, bus/natstransport,
// or any Pub/Sub) commands go to one topic per command name and replies to
// one topic per bus. Handlers are registered before Start; Close lets
// running handlers finish and no goroutine of the bus outlives it.
//
// docs/bus.md describes handlers, ids, transports and the lifecycle.
package bus
