package middleware

import (
	"errors"
	"fmt"
	"runtime/debug"
)

// PanicError is a panic recovered from a hook, a handler, a ResultFunc, a
// command decoder or other user code (see Recover); it becomes the
// command's error.
type PanicError struct {
	// Where names what panicked: "BeforeDispatch", "handler",
	// "AfterDispatch", "AfterFailure", "ResultFunc", "command decoder", or
	// what the caller of Recover named.
	Where string
	// Value is what was passed to panic.
	Value any
	// Stack is the stack trace of the panicking goroutine.
	Stack []byte
}

// Error returns a one-line description without the stack.
func (e *PanicError) Error() string {
	return fmt.Sprintf("middleware: panic in %s: %v", e.Where, e.Value)
}

// Recover calls f and returns its panic, if any, as a *PanicError naming
// where; it returns nil when f returns. It is how the runner calls hooks and
// handlers; code that calls user code outside a run (a decoder, an encoder,
// a lookup) uses it so that a panic there is an error too, not the end of
// the process. It is exported for middleware that lives in a package of
// its own, such as uniqueness's lookups, idempotency's fingerprints, or a
// user's: their panics are then the same *PanicError the runner reports.
func Recover(where string, f func()) (err error) {
	defer func() {
		if v := recover(); v != nil {
			err = &PanicError{Where: where, Value: v, Stack: debug.Stack()}
		}
	}()
	f()
	return nil
}

// Unwrap returns the panic value when it is an error.
func (e *PanicError) Unwrap() error {
	err, _ := e.Value.(error)
	return err
}

// Errors of the command registry and the adapters, matched with errors.Is.
var (
	// ErrUnknownCommand is returned for a message whose command name no
	// Registry entry has.
	ErrUnknownCommand = errors.New("middleware: unknown command")
	// ErrUndecodable is returned for a message whose payload does not decode
	// into its command type.
	ErrUndecodable = errors.New("middleware: undecodable command")
	// errDuplicateCommand is returned when a command name is registered for
	// two different types.
	errDuplicateCommand = errors.New("middleware: command name registered twice")

	// errIncompleteRequestReply is reported by the Validate of a config
	// that answers requestreply senders (a RequestReply's) without acking
	// handler errors: use RequestReply.HandlerConfig.
	errIncompleteRequestReply = errors.New("middleware: incomplete requestreply set-up")
	// ErrUnhandledCommandType is returned where a pipeline is built (the
	// bus's Start, RouterMiddleware) for a command type a middleware acts on
	// (see CommandTyper) that no command of the pipeline has: a rule
	// written for the wrong type, or a handler not registered.
	ErrUnhandledCommandType = errors.New("middleware: unhandled command type")
)
