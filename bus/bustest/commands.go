package bustest

import (
	"context"
	"errors"

	"github.com/claimbus/claimbus/middleware"
)

// The commands of the suite. Their names on the wire are "bustest." and
// the type's name (the bus's default marshaler), such as "bustest.echo".
type (
	echo       struct{ Text string }
	echoResult struct{ Text string }
	fail       struct{ Why string }
	// taken is halted by takenMiddleware.
	taken struct{ Email string }
	// broken cannot be decoded.
	broken struct{}
	// panicky's decoder panics.
	panicky struct{}
	// boom's handler panics.
	boom struct{}
	// exit's handler ends its goroutine with runtime.Goexit.
	exit  struct{}
	block struct{ ID int }
	count struct{ N int }
	// slow is held in a BeforeDispatch hook (as behind a claim).
	slow   struct{ ID int }
	parent struct{}
	child  struct{}
	inner  struct{}
	// orphan has no handler.
	orphan struct{}
	// badResult's handler returns a result whose encoder panics.
	badResult struct{}
)

func (*broken) UnmarshalJSON([]byte) error { return errors.New("broken on purpose") }

func (*panicky) UnmarshalJSON([]byte) error { panic("decoder boom") }

// panickyResult's encoder panics.
type panickyResult struct{}

func (panickyResult) MarshalJSON() ([]byte, error) { panic("encoder boom") }

// takenMiddleware halts taken commands with an already_taken rejection
// naming the email field.
var takenMiddleware = middleware.Hooks{OnBeforeDispatch: func(_ context.Context, p *middleware.Pipeline) {
	if _, ok := p.Command.(*taken); ok {
		p.Halt(middleware.Reject(middleware.CodeAlreadyTaken, "email", "email is already taken"))
	}
}}
