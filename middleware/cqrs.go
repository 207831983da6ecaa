package middleware

import (
	"context"
	"errors"
	"fmt"
	"reflect"

	"github.com/ThreeDotsLabs/watermill/components/cqrs"
	"github.com/ThreeDotsLabs/watermill/message"
)

// HandlerConfig configures OnHandle.
type HandlerConfig struct {
	// Runner runs the middleware around each command. Required.
	Runner *Runner
	// OnResult, when set, receives the outcome of every command; see
	// ResultFunc. Default: none.
	OnResult ResultFunc
	// AckHandlerErrors returns nil (ack) for a command whose handler failed
	// or was skipped, instead of its error (nack, unless the processor's
	// AckCommandHandlingErrors is set). Set it when OnResult answers the
	// sender. Default false.
	AckHandlerErrors bool
	// Handlers are the handlers of the processor, as given to its
	// AddHandlers. Required by OnHandle, which checks the command types
	// the Runner's middleware act on (see CommandTyper) against theirs
	// (NewCommand): a rule for a type no handler handles is an error
	// matching ErrUnhandledCommandType, not a rule that never acts.
	Handlers []cqrs.CommandHandler
}

// Validate reports every problem of the configuration.
func (c HandlerConfig) Validate() error {
	var errs []error
	if c.Runner == nil {
		errs = append(errs, errors.New("middleware: HandlerConfig.Runner is nil"))
	}
	if err := repliesWithoutAck(c.OnResult, c.AckHandlerErrors); err != nil {
		errs = append(errs, fmt.Errorf("middleware: HandlerConfig: %w", err))
	}
	return errors.Join(errs...)
}

// checkHandlers checks the Runner's middleware against the command types
// of the Handlers.
func (c HandlerConfig) checkHandlers() error {
	if len(c.Handlers) == 0 {
		return errors.New("middleware: OnHandle: HandlerConfig.Handlers is empty: give the handlers of the processor, " +
			"so that the command types of the middleware are checked against theirs")
	}
	types := make([]reflect.Type, 0, len(c.Handlers))
	for i, h := range c.Handlers {
		if h == nil {
			return fmt.Errorf("middleware: OnHandle: HandlerConfig.Handlers[%d] is nil", i)
		}
		types = append(types, reflect.TypeOf(h.NewCommand()))
	}
	if c.Runner == nil {
		return nil
	}
	if err := CheckCommandTypes(c.Runner.mws, types); err != nil {
		return fmt.Errorf("middleware: OnHandle: %w", err)
	}
	return nil
}

func (c HandlerConfig) outcome() outcome {
	return newOutcome(c.OnResult, c.AckHandlerErrors)
}

// OnHandle returns a cqrs.CommandProcessorConfig.OnHandle that runs the
// pipeline around every handler of the processor, on the command the
// processor decoded. The handler gets the run's handler context, derived
// from the message's (so cqrs.OriginalMessageFromCtx keeps working) and
// carrying the pipeline.
//
// A halted command returns nil (ack); a failed one returns its error (nack,
// unless AckHandlerErrors or the processor's AckCommandHandlingErrors); an
// OnResult error is returned in every case.
func OnHandle(cfg HandlerConfig) (cqrs.CommandProcessorOnHandleFn, error) {
	if err := errors.Join(cfg.Validate(), cfg.checkHandlers()); err != nil {
		return nil, err
	}
	out := cfg.outcome()
	return func(params cqrs.CommandProcessorOnHandleParams) error {
		msg := params.Message
		p := newMessagePipeline(msg, params.Command, params.CommandName)
		return out.run(msg.Context(), cfg.Runner, msg, p, func(ctx context.Context, p *Pipeline) (any, error) {
			if cqrs.OriginalMessageFromCtx(ctx) == nil {
				// A hook replaced the context with one not derived from
				// the message's: keep requestreply handlers working.
				ctx = cqrs.CtxWithOriginalMessage(ctx, msg)
			}
			return nil, params.Handler.Handle(ctx, p.Command)
		})
	}, nil
}

// CQRSOnSend returns the cqrs.CommandBusConfig.OnSend that calls each of
// fns, in order, with the sender's context and the command message, as
// bus.Config.OnSend would be called: pass it the OnSend functions of the
// telemetry and idempotency packages, for instance, to carry a trace and
// an idempotency key through a cqrs.CommandBus.
func CQRSOnSend(fns ...func(ctx context.Context, msg *message.Message)) cqrs.CommandBusOnSendFn {
	return func(params cqrs.CommandBusOnSendParams) error {
		for _, f := range fns {
			f(params.Message.Context(), params.Message)
		}
		return nil
	}
}
