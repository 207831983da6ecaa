package middleware

import (
	"context"
	"errors"

	"github.com/claimbus/claimbus/lockstore"
)

// storeCodes is the one table from a store's errors to rejection codes,
// first match wins; every other error is CodeUnavailable. storeSentinels
// maps a code back to the lockstore sentinel of the same meaning, which a
// halt with that code matches on this node whatever its cause (see
// RejectStoreError); invalid has none, its cause is the key's own error.
var storeCodes = []struct {
	err  error
	code string
}{
	{lockstore.ErrLocked, CodeLocked},
	{lockstore.ErrInvalidKey, CodeInvalid}, // claimstore.ErrInvalid for a key matches it too
	{lockstore.ErrTimeout, CodeTimeout},
	{context.DeadlineExceeded, CodeTimeout}, // a wait bounded by the middleware's own deadline
	// lockstore.ErrUnavailable (claimstore.ErrUnavailable matches it),
	// lockstore.ErrCapacity, lockstore.ErrClosed and any other error:
	// CodeUnavailable, the sender may try again.
}

// storeSentinels are the lockstore errors that mean what a rejection code
// means.
var storeSentinels = map[string]error{
	CodeLocked:      lockstore.ErrLocked,
	CodeTimeout:     lockstore.ErrTimeout,
	CodeUnavailable: lockstore.ErrUnavailable,
}

// storeErrorCode returns the rejection code of a command halted because a
// lock or claim store failed with err: the one table (see
// RejectStoreError).
func storeErrorCode(err error) string {
	for _, e := range storeCodes {
		if errors.Is(err, e.err) {
			return e.code
		}
	}
	return CodeUnavailable
}

// RejectStoreError returns the halt reason of a command whose store failed
// with err: a rejection with err's code (CodeLocked for lockstore.ErrLocked,
// CodeInvalid for lockstore.ErrInvalidKey, CodeTimeout for
// lockstore.ErrTimeout and context.DeadlineExceeded, a wait the middleware
// bounded, and CodeUnavailable for anything else: lockstore.ErrUnavailable
// and claimstore.ErrUnavailable, lockstore.ErrCapacity, a closed store),
// naming field (may be empty), with the message that message returns for
// that code (called once). A middleware checks first whether the command's
// own context ended: then there is no rejection to send, nobody waits for
// it. The message is for people and crosses the wire: name the key or the
// field, never err, whose text can name a server, a port or a user. err
// stays on this node, wrapped beside the rejection: errors.Is finds it,
// and its text follows the rejection's in Error() for the logs (unless it
// is the bare lockstore sentinel of the code, which says nothing more).
//
// On this node the halt also matches the lockstore sentinel of its code
// (lockstore.ErrLocked for locked, ErrTimeout for timeout, ErrUnavailable
// for unavailable), so that errors.Is(err, lockstore.ErrTimeout) and
// errors.Is(err, ErrTimeout) agree whichever middleware halted and
// whatever the cause. On the sender's side of a wire the halt is its
// rejection alone, which matches its code's sentinel (ErrTimeout).
func RejectStoreError(err error, field string, message func(code string) string) error {
	code := storeErrorCode(err)
	return &causedRejection{Rejection: Reject(code, field, "%s", message(code)), cause: err, same: storeSentinels[code]}
}

// causedRejection is a rejection built from a local error, the one type of
// every halt with a cause: it crosses the wire as the rejection, and
// errors.Is also finds the cause (and same, the lockstore sentinel of a
// store error's code) on this node.
type causedRejection struct {
	*Rejection
	cause error
	same  error // the lockstore sentinel of the code, or nil
}

// Error returns the rejection's text, then the cause's when the rejection
// does not say it already (its message is not the cause's text, and the
// cause is not the bare sentinel of the code).
func (e *causedRejection) Error() string {
	if e.cause == e.same || e.Message == e.cause.Error() { //nolint:errorlint // the bare sentinel itself, not an error wrapping it
		return e.Rejection.Error()
	}
	return e.Rejection.Error() + ": " + e.cause.Error()
}

// Unwrap returns the rejection, the cause and the lockstore sentinel of
// the code, if any.
func (e *causedRejection) Unwrap() []error {
	if e.same == nil {
		return []error{e.Rejection, e.cause}
	}
	return []error{e.Rejection, e.cause, e.same}
}
