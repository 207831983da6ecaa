package middleware

import (
	"errors"
	"fmt"
	"net/http"

	"github.com/claimbus/claimbus/internal/wire"
)

// Rejection codes: why a command was halted.
const (
	CodeAlreadyTaken = "already_taken"
	CodeLocked       = "locked"
	CodeInvalid      = "invalid"
	CodeUnavailable  = "unavailable"
	CodeTimeout      = "timeout"
	// CodeIdempotencyConflict rejects a command whose idempotency key was
	// already used by a command with another payload (see the idempotency
	// package): the stored answer is for that other command.
	CodeIdempotencyConflict = "idempotency_conflict"
	// CodeNotApplied says that nothing of the command applied (its
	// transaction rolled back, or never began): the sender may send it
	// again. CodeOutcomeUnknown says that its COMMIT was sent and not
	// answered: it may have applied; only a repeat with the same
	// idempotency key is safe.
	CodeNotApplied     = "not_applied"
	CodeOutcomeUnknown = "outcome_unknown"
)

// Rejection is a structured business rejection of a command: a code such as
// "already_taken", the field it concerns, if any (Field), and a message for
// people (Message). It crosses the wire as data, so a sender on another node
// gets a *Rejection back and errors.Is and errors.As hold there too.
//
// errors.Is matches rejections by Code alone, so
// errors.Is(err, ErrAlreadyTaken) holds for a rejection naming any field.
// A rejection built on this node from a store's error wraps that error
// beside it (errors.Is finds both); only the rejection crosses the wire.
type Rejection struct {
	// Code says why, such as CodeAlreadyTaken; errors.Is matches by it.
	Code string `json:"code"`
	// Field names the command field concerned, if any, such as "email".
	Field string `json:"field,omitempty"`
	// Message is for people.
	Message string `json:"message,omitempty"`
}

// RemoteError is a command's error that is not a rejection, as the sender
// gets it back from a handler that may run on another node: its message
// only, since error types do not cross a wire.
type RemoteError struct {
	// Message is the handler's error message (err.Error()).
	Message string
}

// Error returns the handler's error message.
func (e *RemoteError) Error() string { return e.Message }

// The wire encoding (internal/wire, shared with the bus) encodes and
// decodes these types.
func init() {
	wire.Register(wire.Types{
		Find: func(err error) (*wire.Rejection, bool) {
			var rej *Rejection
			if errors.As(err, &rej) {
				return (*wire.Rejection)(rej), true
			}
			return nil, false
		},
		Rejection: func(r *wire.Rejection) error { return (*Rejection)(r) },
		Remote:    func(message string) error { return &RemoteError{Message: message} },
	})
}

// Sentinel rejections, matched with errors.Is.
var (
	ErrAlreadyTaken error = &Rejection{Code: CodeAlreadyTaken, Message: "already taken"}
	ErrLocked       error = &Rejection{Code: CodeLocked, Message: "resource is locked"}
	ErrInvalid      error = &Rejection{Code: CodeInvalid, Message: "invalid command"}
	ErrUnavailable  error = &Rejection{Code: CodeUnavailable, Message: "temporarily unavailable"}
	ErrTimeout      error = &Rejection{Code: CodeTimeout, Message: "timed out"}
	// ErrIdempotencyConflict matches a rejection with CodeIdempotencyConflict.
	ErrIdempotencyConflict error = &Rejection{Code: CodeIdempotencyConflict, Message: "idempotency key used by another command"}
	ErrNotApplied          error = &Rejection{Code: CodeNotApplied, Message: "the command did not apply"}
	ErrOutcomeUnknown      error = &Rejection{Code: CodeOutcomeUnknown, Message: "the command's outcome is unknown"}
)

// Reject returns a rejection with code, naming field (may be empty), with a
// message made of format and args.
func Reject(code, field, format string, args ...any) *Rejection {
	return &Rejection{Code: code, Field: field, Message: fmt.Sprintf(format, args...)}
}

// Error returns "code: field: message", leaving out the empty parts.
func (r *Rejection) Error() string {
	s := r.Code
	if r.Field != "" {
		s += ": " + r.Field
	}
	if r.Message != "" {
		s += ": " + r.Message
	}
	return s
}

// Is reports whether target is a *Rejection with the same code.
func (r *Rejection) Is(target error) bool {
	t, ok := target.(*Rejection)
	return ok && t.Code == r.Code
}

// HTTPStatus is the HTTP status that answers a command failing with err:
// 409 Conflict for already_taken and idempotency_conflict, 422 for
// invalid, 423 for locked, 504 for timeout, 503 for unavailable,
// not_applied and outcome_unknown (send a Retry-After with it), 500 for any other code or an error that is no
// rejection, and 200 for nil. An app with codes of its own maps them first.
func HTTPStatus(err error) int {
	if err == nil {
		return http.StatusOK
	}
	var rej *Rejection
	if !errors.As(err, &rej) {
		return http.StatusInternalServerError
	}
	switch rej.Code {
	case CodeAlreadyTaken, CodeIdempotencyConflict:
		return http.StatusConflict
	case CodeInvalid:
		return http.StatusUnprocessableEntity
	case CodeLocked:
		return http.StatusLocked
	case CodeTimeout:
		return http.StatusGatewayTimeout
	case CodeUnavailable, CodeNotApplied, CodeOutcomeUnknown:
		return http.StatusServiceUnavailable
	}
	return http.StatusInternalServerError
}
