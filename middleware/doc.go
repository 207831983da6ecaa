// Package middleware runs before-dispatch, after-dispatch and after-failure
// hooks around command handlers, and plugs them into Watermill routers and
// cqrs processors.
//
// A Pipeline carries one command through the hooks. A Middleware's
// BeforeDispatch may take claims and locks, keep them in the pipeline with
// Assign, or halt the command with a structured *Rejection (already_taken,
// locked, invalid, unavailable, timeout) that reaches the sender as data;
// its AfterDispatch and AfterFailure release what it took. A Runner runs
// the hooks and the handler with the guarantees that make release reliable:
// after hooks run exactly once, in reverse order, only for middleware whose
// before hook started, even on panic or when the sender went away.
//
// # Plugging into Watermill
//
// Three adapters run a Runner where Watermill users already handle
// commands; add them before the router runs (Watermill ignores middleware
// added to a running handler):
//
//   - RouterMiddleware, a message.HandlerMiddleware for any router: it
//     decodes the command named in the message's metadata with a Registry
//     of command types and a cqrs marshaler;
//   - OnHandle, for cqrs.CommandProcessorConfig.OnHandle;
//   - WrapHandler, around one cqrs.CommandHandler.
//
// Claims and locks belong to the run, not to the message's context, which
// Watermill cancels on ack and on Close: the after hooks get a context of
// their own. A halted command is acked (a business rejection must not be
// redelivered); a handler error is returned to the router (nack) unless the
// adapter's AckHandlerErrors is set; an undecodable message is rejected as
// invalid and acked, never redelivered forever.
//
// # Answering senders that wait
//
// Each adapter calls its ResultFunc once per run with the outcome, halts
// included: the bus package answers its senders there. For senders using
// Watermill's requestreply, ReplyMarshaler keeps a rejection a *Rejection
// across the wire (errors.Is(reply.Error, ErrAlreadyTaken) holds), and
// ReplyUnhandled answers the commands that never reached the handler, whose
// senders would otherwise wait until their context ends:
//
//	backend, _ := requestreply.NewPubSubBackend(backendConfig, middleware.ReplyMarshaler[Result]{})
//	mw, _ := middleware.RouterMiddleware(middleware.RouterConfig{
//		Runner:           runner,
//		Registry:         registry,
//		OnResult:         middleware.ReplyUnhandled[Result](backend),
//		AckHandlerErrors: true, // a handler error is an answer, not a redelivery
//	})
//	router.AddMiddleware(mw)
//
// Leave the backend's AckCommandErrors false, so that the runner sees a
// handler's error (and runs AfterFailure); the adapter acks it.
//
// # Built-in middleware
//
// Validate halts a command whose Validate method fails, as invalid, naming
// the field. Lock takes per-resource locks from a lockstore.Locker (one
// transfer at a time), halts as locked or timeout, releases in the after
// hooks (logging a release that fails, at Error when the lock was lost),
// and cancels the handler's context if a lock is lost. Logging logs
// each command's outcome on log/slog. The uniqueness package adds claims on
// unique values.
package middleware
