package middleware

import (
	"errors"
	"fmt"
)

// PanicError is a panic recovered from a hook, a handler, a ResultFunc or
// a command decoder; it becomes the command's error.
type PanicError struct {
	// Where names what panicked: "BeforeDispatch", "handler",
	// "AfterDispatch", "AfterFailure", "ResultFunc" or "command decoder".
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
	// ErrDuplicateCommand is returned when a command name is registered for
	// two different types.
	ErrDuplicateCommand = errors.New("middleware: command name registered twice")
)
