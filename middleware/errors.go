package middleware

import "fmt"

// PanicError is a panic recovered from a hook or a handler; it becomes the
// command's error.
type PanicError struct {
	// Where names what panicked: "BeforeDispatch", "handler",
	// "AfterDispatch" or "AfterFailure".
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
