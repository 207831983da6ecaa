package middleware

import (
	"context"

	"github.com/ThreeDotsLabs/watermill/components/cqrs"
)

// ChainOnHandle composes cqrs.CommandProcessorConfig.OnHandle functions
// into one, for a processor whose only OnHandle slot is taken already (by
// metrics, tracing, or OnHandle of this package): the first runs
// outermost, and each one's call of params.Handler.Handle runs the next,
// the last calling the processor's handler. nil functions are skipped; with
// none left, the processor's handler is called directly.
//
//	cfg.OnHandle = middleware.ChainOnHandle(existingOnHandle, claimbusOnHandle)
//
// The context a function passes to Handle reaches the next one as the
// message's context (params.Message.Context()), which is where OnHandle and
// Watermill's own OnHandle functions read it.
func ChainOnHandle(fns ...cqrs.CommandProcessorOnHandleFn) cqrs.CommandProcessorOnHandleFn {
	var chain []cqrs.CommandProcessorOnHandleFn
	for _, f := range fns {
		if f != nil {
			chain = append(chain, f)
		}
	}
	return func(params cqrs.CommandProcessorOnHandleParams) error {
		return callOnHandle(chain, params)
	}
}

// callOnHandle runs chain[0] with a handler that runs the rest of chain.
func callOnHandle(chain []cqrs.CommandProcessorOnHandleFn, params cqrs.CommandProcessorOnHandleParams) error {
	if len(chain) == 0 {
		return params.Handler.Handle(params.Message.Context(), params.Command)
	}
	outer := params
	outer.Handler = &chainStep{rest: chain[1:], params: params}
	return chain[0](outer)
}

// chainStep is the handler an OnHandle of a chain calls: it runs the rest
// of the chain, with the context it is given as the message's.
type chainStep struct {
	rest   []cqrs.CommandProcessorOnHandleFn
	params cqrs.CommandProcessorOnHandleParams
}

// HandlerName returns the processor's handler's name.
func (s *chainStep) HandlerName() string { return s.params.Handler.HandlerName() }

// NewCommand returns the processor's handler's new command.
func (s *chainStep) NewCommand() any { return s.params.Handler.NewCommand() }

// Handle runs the rest of the chain on cmd, with ctx as the message's
// context while it runs.
func (s *chainStep) Handle(ctx context.Context, cmd any) error {
	p := s.params
	p.Command = cmd
	orig := p.Message.Context()
	p.Message.SetContext(ctx)
	defer p.Message.SetContext(orig)
	return callOnHandle(s.rest, p)
}
