package middleware

import (
	"context"
	"errors"
)

// validator is implemented by commands that check themselves. An error
// with a `Field() string` method names the field it concerns; the
// commands need no import of claimbus for it.
type validator interface {
	Validate() error
}

// fieldError is an error naming the command field it concerns.
type fieldError interface {
	error
	Field() string
}

// Validate returns a middleware that halts a command with a method
// Validate() error that fails: with the *Rejection the error holds, if
// any, and otherwise with an `invalid` rejection (matching ErrInvalid)
// whose message is the error's and whose field is the one named by the
// first error in the chain with a Field() string method. Commands without
// that method pass through. Put it before middleware that takes
// claims or locks, so that an invalid command takes none.
func Validate() Middleware { return validateMiddleware{} }

type validateMiddleware struct{}

// BeforeDispatch validates the command.
func (validateMiddleware) BeforeDispatch(_ context.Context, p *Pipeline) {
	v, ok := p.Command.(validator)
	if !ok {
		return
	}
	err := v.Validate()
	if err == nil {
		return
	}
	p.Halt(invalidCommand(err))
}

// AfterDispatch does nothing.
func (validateMiddleware) AfterDispatch(context.Context, *Pipeline) {}

// AfterFailure does nothing.
func (validateMiddleware) AfterFailure(context.Context, *Pipeline) {}

// invalidCommand turns a validation error into a rejection.
func invalidCommand(err error) error {
	var rej *Rejection
	if errors.As(err, &rej) {
		return rej
	}
	r := &Rejection{Code: CodeInvalid, Message: err.Error()}
	var fe fieldError
	if errors.As(err, &fe) {
		r.Field = fe.Field()
	}
	return &causedRejection{Rejection: r, cause: err}
}
