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
package middleware
