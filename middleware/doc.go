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
// RouterMiddleware (any Watermill router) and OnHandle
// (cqrs.CommandProcessorConfig.OnHandle) run a Runner where Watermill users handle commands;
// add them before the router runs. The after hooks get a context of their
// own, not the message's, which Watermill cancels on ack. A halted command
// is acked; a handler error is nacked unless AckHandlerErrors is set; an
// undecodable message is rejected as invalid and acked. Each adapter calls
// its ResultFunc once per run with the outcome; RequestReply answers
// senders that use Watermill's requestreply.
//
// Validate, Lock and Logging are built in; the uniqueness and idempotency
// packages add claims on unique values and stored answers. A halt reason
// is a *Rejection matched by code (ErrLocked, ErrTimeout, ErrUnavailable,
// ErrInvalid, ...), also on a sender on another node; RejectStoreError
// builds one from a store error by one table, wrapping that error too,
// so on this node errors.Is finds both.
//
// docs/middleware.md describes the adapters, answering senders that wait,
// the built-in middleware, the errors, and where new code goes.
package middleware
