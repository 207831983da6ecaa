package middleware

import (
	"context"
)

// Pipeline carries one command through the hooks of the middleware and its
// handler. A hook reads the command and its ids, keeps scratch values with
// Assign, may replace the context the handler gets (SetContext), may set the
// response (Respond), and may stop the command (Halt).
//
// A Pipeline belongs to one run; its methods are not safe for concurrent
// use by several goroutines (hooks run one after the other).
type Pipeline struct {
	// Command is the decoded command, a pointer such as *commands.CreateStaff.
	Command any
	// CommandName is the command's name on the wire (the cqrs marshaler's
	// Name, such as "commands.CreateStaff").
	CommandName string
	// CommandUUID identifies this command; it is the Watermill message UUID.
	CommandUUID string
	// CorrelationID is shared by every command and event of one business
	// flow; CausationID is the id of the message that caused this command.
	CorrelationID string
	CausationID   string
	// Metadata is the message's metadata. Hooks may read it; writing to it
	// changes nothing on the wire.
	Metadata map[string]string

	ctx       context.Context
	assigns   map[string]any
	response  any
	responded bool
	halted    bool
	handled   bool
	err       error
	// answers: the adapter running p answers requestreply senders, so a
	// requestreply handler leaves its reply to it (RequestReply).
	answers bool

	// after is the state of the run's after hooks, kept here rather than
	// allocated per run.
	after afterRun
	// hctx is the handler's context: Context() carrying p, kept here
	// rather than allocated by context.WithValue per run.
	hctx handlerCtx
}

// NewPipeline returns a pipeline for cmd whose handler context starts as ctx.
func NewPipeline(ctx context.Context, cmd any) *Pipeline {
	return &Pipeline{Command: cmd, ctx: ctx}
}

// Context is the context the handler will get. It starts as the context the
// runner was given; a hook may replace it with SetContext, for instance to
// cancel the handler when a claim is lost.
func (p *Pipeline) Context() context.Context {
	if p.ctx == nil {
		return context.Background()
	}
	return p.ctx
}

// SetContext replaces the context the handler will get. Derive it from
// Context() so that values and cancellation carry over.
func (p *Pipeline) SetContext(ctx context.Context) { p.ctx = ctx }

// Assign keeps v under key for the later hooks of this run (the claimed
// handle, a lock).
func (p *Pipeline) Assign(key string, v any) {
	if p.assigns == nil {
		p.assigns = make(map[string]any, 2)
	}
	p.assigns[key] = v
}

// Assigned returns the value kept under key, and whether there is one.
func (p *Pipeline) Assigned(key string) (any, bool) {
	v, ok := p.assigns[key]
	return v, ok
}

// Respond sets the command's response. The first response wins: later calls
// change nothing and return false. A handler's result is the response when
// no hook responded before it.
func (p *Pipeline) Respond(v any) bool {
	if p.responded {
		return false
	}
	p.response, p.responded = v, true
	return true
}

// Response returns the response and whether one was set.
func (p *Pipeline) Response() (any, bool) { return p.response, p.responded }

// Halt stops the command: the hooks after this one and the handler do not
// run, and the after-failure hooks do. err is the reason the sender gets
// back, usually a *Rejection such as one matching ErrAlreadyTaken; a nil err
// halts a command that is already done (a redelivery whose work committed),
// and the sender gets the response with no error.
func (p *Pipeline) Halt(err error) {
	if p.halted {
		return
	}
	p.halted = true
	if p.err == nil {
		p.err = err
	}
}

// Halted reports whether a hook halted the command.
func (p *Pipeline) Halted() bool { return p.halted }

// Err is why the command failed so far: the halt reason, the handler's
// error, or a recovered panic. It is nil while the command succeeds, and
// in after-failure hooks of a command halted with a nil error.
func (p *Pipeline) Err() error { return p.err }

// Fail records err as the command's error unless one is already recorded.
// It is for an after hook whose work decides the command's fate, such as
// a COMMIT that failed: the sender gets err, and the after hooks that run
// later see it in Err.
func (p *Pipeline) Fail(err error) {
	if err != nil {
		p.fail(err)
	}
}

// fail records err as the command's error unless one is already recorded.
func (p *Pipeline) fail(err error) {
	if p.err == nil {
		p.err = err
	}
}
