package bus

import (
	"context"
	"errors"
	"fmt"

	"github.com/claimbus/claimbus/middleware"
)

// Errors returned by the bus, matched with errors.Is.
var (
	// ErrNotStarted is returned by Dispatch and Send before Start or Run.
	ErrNotStarted = errors.New("bus: not started")
	// ErrClosed is returned by Dispatch and Send once Close has begun, and by
	// a Dispatch still waiting for its reply when the bus closes. A closed
	// transport of this module fails with it too: a closed transport carries
	// no command either. (lockstore.ErrClosed, a closed lock store, is
	// another meaning: a command halted by it is unavailable.)
	ErrClosed = errors.New("bus: closed")
	// ErrInvalidTopic is matched by a transport's error for a topic or node
	// id it cannot carry, such as one that Config.CommandTopic or
	// Config.ReplyTopic made.
	ErrInvalidTopic = errors.New("bus: invalid topic")
	// ErrStarted is returned by Handle after Start: handlers are registered
	// before the bus starts.
	ErrStarted = errors.New("bus: already started")
	// ErrDuplicateHandler is returned by Handle for a command name that
	// already has a handler.
	ErrDuplicateHandler = errors.New("bus: duplicate handler")
	// ErrNoHandler is returned by Dispatch and Send on an in-process bus (no
	// Publisher configured) for a command that has no handler.
	ErrNoHandler = errors.New("bus: no handler for command")
	// ErrNilCommand is returned by Dispatch and Send for a nil command.
	ErrNilCommand = errors.New("bus: nil command")
	// ErrUndecodableReply is returned by Dispatch when the reply's result
	// cannot be decoded into the R the sender asked for.
	ErrUndecodableReply = errors.New("bus: undecodable reply")
)

// errLostInFlight is the rejection of a Dispatch whose transport lost its
// connection while it waited: a message for people, naming no server.
var errLostInFlight = &middleware.Rejection{Code: middleware.CodeUnavailable,
	Message: "the command queue lost its connection while this command was in flight: it may or may not be applied, try again"}

// timeoutErr is the error of a Dispatch whose ctx ended before the reply
// came: it names the command and its id, and matches the context's error
// and middleware.ErrTimeout.
type timeoutErr struct {
	id, name string
	err      error
}

func (e *timeoutErr) Error() string {
	return fmt.Sprintf("bus: no reply to command %s (id %s): %v", e.name, e.id, e.err)
}

func (e *timeoutErr) Unwrap() []error { return []error{e.err, middleware.ErrTimeout} }

// timeoutError returns the error of a Dispatch whose ctx ended.
func timeoutError(ctx context.Context, id, name string) error {
	return &timeoutErr{id: id, name: name, err: ctx.Err()}
}
