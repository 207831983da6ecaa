package app

import (
	"errors"

	"github.com/claimbus/claimbus/commands"
	"github.com/claimbus/claimbus/middleware"
)

// Rejection codes of the example's own business rules, beside those of
// package middleware (already_taken, locked, invalid, unavailable,
// timeout). They cross the bus as *middleware.Rejection like those.
const (
	CodeNotFound          = "not_found"
	CodeNotOpen           = "not_open"
	CodeInsufficientFunds = "insufficient_funds"
	// CodeConflictingReplay: a CreateStaff with the staff_id and address
	// of a member already created, and another name. Answered 409.
	CodeConflictingReplay = "conflicting_replay"
)

// Codes of answers of the HTTP API that are not rejections of a command.
const (
	// CodeBadRequest: the request is not one the API understands: a body
	// that is not one JSON object of the route's fields, a path id that
	// no id can be, a bad query. Answered 400.
	CodeBadRequest = "bad_request"
	// CodeTooLarge: the body is over the limit. Answered 413.
	CodeTooLarge = "too_large"
	// CodeMethodNotAllowed: the route has no such method. Answered 405,
	// with an Allow header.
	CodeMethodNotAllowed = "method_not_allowed"
	// CodeInternal: a failure the API has no better answer for, logged.
	// Answered 500; bad input and outages never are.
	CodeInternal = "internal"
)

// Sentinel rejections of the example, matched with errors.Is (by code).
var (
	// ErrNotFound: the wallet, transfer or lobby a command names does not
	// exist.
	ErrNotFound error = &middleware.Rejection{Code: CodeNotFound, Message: "not found"}
	// ErrNotOpen: the transfer was already approved or cancelled.
	ErrNotOpen error = &middleware.Rejection{Code: CodeNotOpen, Message: "transfer is not open"}
	// ErrInsufficientFunds: the wallet a transfer is from holds less than
	// its amount.
	ErrInsufficientFunds error = &middleware.Rejection{Code: CodeInsufficientFunds, Message: "insufficient funds"}
	// ErrConflictingReplay: a sign-up replayed with another name.
	ErrConflictingReplay error = &middleware.Rejection{Code: CodeConflictingReplay, Message: "conflicting replay"}
)

// ErrNilBackend is returned by New for a Config without a Backend.
var ErrNilBackend = errors.New("app: Config.Backend is nil (use SQLiteBackend or PostgresBackend)")

// invalid returns err, the refusal of a commands check (a
// *commands.FieldError), as the rejection middleware.Validate makes of the
// same refusal in a command: invalid, naming the field, with the same
// message.
func invalid(err error) error {
	var fe *commands.FieldError
	if errors.As(err, &fe) {
		return middleware.Reject(middleware.CodeInvalid, fe.Field(), "%s", fe.Error())
	}
	return err
}
