// Package sentinel makes the sentinel errors that give one meaning a second
// name: a package's own sentinel, with its own message, that errors.Is also
// matches with the sentinel of the package that defines the meaning (a
// transport's ErrClosed matches bus.ErrClosed, idempotency's ErrLockLost
// matches lockstore.ErrLockLost).
package sentinel

// New returns an error whose message is msg and that errors.Is matches with
// itself and with each of also (and what they match).
func New(msg string, also ...error) error {
	return &sentinel{msg: msg, also: also}
}

type sentinel struct {
	msg  string
	also []error
}

// Error returns the message.
func (s *sentinel) Error() string { return s.msg }

// Unwrap returns the sentinels this one also matches.
func (s *sentinel) Unwrap() []error { return s.also }
