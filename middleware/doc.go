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
// Watermill's requestreply, a RequestReply is the backend of the handlers
// and the senders, and its configs make the adapter answer them:
//
//	rr, _ := middleware.NewRequestReply[Result](backendConfig)
//	handler := requestreply.NewCommandHandlerWithResult("create_staff", rr, createStaff)
//	onHandle, _ := middleware.OnHandle(rr.HandlerConfig(runner))
//	// ... then requestreply.SendWithReply[Result](ctx, commandBus, rr, cmd)
//
// A handler's error reaches the runner, which runs AfterFailure (a
// reservation is cancelled, no outcome is stored) and logs it; the sender
// gets the reply once the after hooks are done, with the command's error
// (the replies keep a rejection a *Rejection, so errors.Is(reply.Error,
// ErrAlreadyTaken) holds), and halted commands are answered too. The
// adapter acks a failed command (AckHandlerErrors): the error was the
// answer.
//
// # Built-in middleware
//
// Validate halts a command whose Validate method fails, as invalid, naming
// the field. Lock takes per-resource locks from a lockstore.Locker (one
// transfer at a time), halts as locked or timeout, releases in the after
// hooks (logging a release that fails, at Error when the lock was lost),
// and cancels the handler's context if a lock is lost. Logging logs
// each command's outcome on log/slog. The uniqueness package adds claims on
// unique values, the idempotency package stored answers by idempotency key.
//
// # Errors
//
// A halt reason is a *Rejection matched by code (ErrLocked, ErrTimeout,
// ErrUnavailable, ErrInvalid, ...), also on a sender on another node.
// StoreErrorCode is the one table from store errors (lockstore, claimstore)
// to codes, and RejectStoreError builds the halt from it; Lock, uniqueness
// and idempotency use both. Such a halt wraps the store's error beside the
// rejection, so on this node errors.Is finds both whichever middleware
// halted. middleware's ErrLocked, ErrTimeout and ErrUnavailable are
// rejections and lockstore's are store errors, one meaning each: on this
// node such a halt matches both, on the sender's side the rejection.
//
// # Where code goes
//
// The package's files fall in four groups:
//
//   - core: the Middleware contract and Hooks (middleware.go), Pipeline
//     (pipeline.go), Runner (runner.go, releasectx.go), rejections and
//     errors (rejection.go, errors.go, storeerrors.go), ids (ids.go),
//     command types (commandtype.go);
//   - wire format: the rejection encoding and metadata keys live in the
//     internal wire package, shared with the bus; this package defines the
//     types it encodes (Rejection, RemoteError in rejection.go, registered
//     with it), re-exports the Metadata* keys, and encodes requestreply
//     replies with it (requestreply.go);
//   - Watermill adapters: Registry (registry.go), RouterMiddleware
//     (router.go), OnHandle, WrapHandler and ChainOnHandle (cqrs.go,
//     chain.go), what they share (adapter.go), requestreply
//     (requestreply.go);
//   - built-in middleware: Validate (validate.go), Lock (lock.go), Logging
//     (logging.go), FailureLog (failurelog.go).
//
// A new middleware is a file here when it needs nothing beyond this
// package, the standard library and lockstore's interfaces (as Lock and
// Logging do), so that importing middleware stays light. It gets its own
// package, as uniqueness and idempotency have, when it brings a store
// contract of its own (claimstore), its own configuration and sweepers, or
// heavier dependencies: a user who does not use it then does not import
// it. Such a package builds on the exported surface only: Middleware and
// Pipeline, the rejections and RejectStoreError, and Recover, which makes
// a panic in user code it calls outside a run (a lookup, an encoder) the
// same *PanicError the runner reports; a user's own middleware package
// uses them the same way.
package middleware
