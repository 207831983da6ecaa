package middleware

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"sync"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/components/cqrs"
	"github.com/ThreeDotsLabs/watermill/components/requestreply"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/claimbus/claimbus/internal/wire"
)

// replyMarshaler is a requestreply.BackendPubsubMarshaler that keeps a
// reply's error as data: a *Rejection comes back as a *Rejection, so that
// errors.Is(reply.Error, ErrAlreadyTaken) and errors.As hold for callers of
// requestreply.SendWithReply; any other error comes back as a *RemoteError
// with its message. The result travels as JSON in the payload. Its replies
// also carry Watermill's own error keys, so a sender using
// requestreply.BackendPubsubJSONMarshaler still reads the error's message.
type replyMarshaler[R any] struct{}

var _ requestreply.BackendPubsubMarshaler[struct{}] = replyMarshaler[struct{}]{}

// MarshalReply encodes the handler's result and error as a reply message.
func (replyMarshaler[R]) MarshalReply(params requestreply.BackendOnCommandProcessedParams[R]) (*message.Message, error) {
	payload, err := json.Marshal(params.HandlerResult)
	if err != nil {
		return nil, fmt.Errorf("middleware: cannot marshal reply result: %w", err)
	}
	msg := message.NewMessage(watermill.NewUUID(), payload)
	if params.HandleErr != nil {
		msg.Metadata.Set(requestreply.HasErrorMetadataKey, "1")
		msg.Metadata.Set(requestreply.ErrorMetadataKey, params.HandleErr.Error())
		wire.SetReplyError(msg, wire.MarshalError(params.HandleErr))
	} else {
		msg.Metadata.Set(requestreply.HasErrorMetadataKey, "0")
	}
	return msg, nil
}

// UnmarshalReply decodes a reply message: the result from the payload, the
// error from the metadata.
func (replyMarshaler[R]) UnmarshalReply(msg *message.Message) (requestreply.Reply[R], error) {
	var reply requestreply.Reply[R]
	if msg.Metadata.Get(requestreply.HasErrorMetadataKey) == "1" {
		if errb := wire.ReplyError(msg); errb != nil {
			reply.Error = wire.UnmarshalError(errb)
		} else {
			reply.Error = &RemoteError{Message: msg.Metadata.Get(requestreply.ErrorMetadataKey)}
		}
	}
	if err := json.Unmarshal(msg.Payload, &reply.HandlerResult); err != nil {
		return requestreply.Reply[R]{}, fmt.Errorf("middleware: cannot unmarshal reply result: %w", err)
	}
	return reply, nil
}

// RequestReply answers Watermill requestreply senders from the pipeline. It
// is the requestreply.Backend to give requestreply.NewCommandHandler,
// NewCommandHandlerWithResult and SendWithReply, and it builds the adapter
// config (HandlerConfig) that answers through it: its OnResult answers
// from a RouterConfig too.
//
// Under an adapter, a requestreply handler's answer waits for the run to
// end: the handler's error reaches the runner (so AfterFailure runs: a
// reservation is cancelled, no outcome is stored, the failure is logged),
// and the sender gets the reply after the after hooks, with the command's
// final error, once an idempotency outcome is stored. A command the
// handler did not answer (halted by a hook, skipped because its context
// was done, rejected undecodable, or handled by a plain cqrs handler) is
// answered with the pipeline's response and error. A repeat answered from
// an idempotency store gets the first run's result, decoded into R.
//
// The reply is encoded by replyMarshaler, so that a rejection stays a
// *Rejection on the sender's side. Messages sent without waiting (no
// operation id) get no reply. A reply that cannot be published is an
// error: the adapter nacks the command, which comes again and is answered
// again. Outside an adapter's run, a handler answers at once, as with
// Watermill's PubSubBackend.
type RequestReply[R any] struct {
	backend  requestreply.Backend[R]
	answerFn ResultFunc // rr.answer, as the adapters' configs get it
}

var _ requestreply.Backend[struct{}] = (*RequestReply[struct{}])(nil)

// NewRequestReply returns the requestreply set-up whose replies travel on
// a PubSubBackend built from cfg with replyMarshaler[R]. cfg's
// AckCommandErrors applies only to handlers that run outside the
// pipeline: under an adapter the handler's error always reaches the
// runner, and the adapter acks it (AckHandlerErrors).
func NewRequestReply[R any](cfg requestreply.PubSubBackendConfig) (*RequestReply[R], error) {
	b, err := requestreply.NewPubSubBackend[R](cfg, replyMarshaler[R]{})
	if err != nil {
		return nil, fmt.Errorf("middleware: NewRequestReply: %w", err)
	}
	return newRequestReply[R](b), nil
}

func newRequestReply[R any](b requestreply.Backend[R]) *RequestReply[R] {
	rr := &RequestReply[R]{backend: b}
	rr.answerFn = rr.answer
	answerFuncs.Store(reflect.ValueOf(rr.answerFn).Pointer(), struct{}{})
	return rr
}

// ListenForNotifications waits for the reply of a command sent with
// requestreply.SendWithReply.
func (rr *RequestReply[R]) ListenForNotifications(ctx context.Context, params requestreply.BackendListenForNotificationsParams) (<-chan requestreply.Reply[R], error) {
	return rr.backend.ListenForNotifications(ctx, params)
}

// OnCommandProcessed is called by requestreply's handlers once the handler
// function returned. Within the run of that command by an adapter that
// answers through a RequestReply, it keeps the result as the pipeline's
// response, leaves the reply to the adapter, and returns the handler's
// error, so that the runner sees it. Otherwise it replies at once.
func (rr *RequestReply[R]) OnCommandProcessed(ctx context.Context, params requestreply.BackendOnCommandProcessedParams[R]) error {
	p, ok := PipelineFromContext(ctx)
	if !ok || !p.answers || params.CommandMessage == nil || p.CommandUUID != params.CommandMessage.UUID {
		return rr.backend.OnCommandProcessed(ctx, params)
	}
	p.Respond(params.HandlerResult)
	return params.HandleErr
}

// answer is the adapters' ResultFunc: it replies to the sender of msg, if
// one waits, with the command's response and error.
func (rr *RequestReply[R]) answer(ctx context.Context, msg *message.Message, result any, err error) error {
	if msg == nil || msg.Metadata.Get(requestreply.OperationIDMetadataKey) == "" {
		return nil
	}
	var cmd any
	if p, ok := PipelineFromContext(ctx); ok {
		cmd = p.Command
	}
	var res R
	switch v := result.(type) {
	case json.RawMessage:
		// A repeat answered from an idempotency store: the first run's
		// result, stored as JSON.
		if uerr := json.Unmarshal(v, &res); uerr != nil && err == nil {
			err = fmt.Errorf("middleware: the stored result of command %s does not decode as %T: %w", msg.UUID, res, uerr)
		}
	case R:
		res = v
	}
	perr := rr.backend.OnCommandProcessed(ctx, requestreply.BackendOnCommandProcessedParams[R]{
		Command:        cmd,
		CommandMessage: msg,
		HandlerResult:  res,
		HandleErr:      err,
	})
	// The PubSubBackend returns the command's own error to nack it unless
	// told to ack: the adapter decides that, not the reply.
	if perr != nil && (err == nil || !errors.Is(perr, err)) {
		return fmt.Errorf("middleware: cannot answer command %s: %w", msg.UUID, perr)
	}
	return nil
}

// answerFuncs holds the code pointers of the RequestReply answerFns, so
// that Validate can tell them from other ResultFuncs.
var answerFuncs sync.Map

// answers reports whether onResult answers requestreply senders (it is a
// RequestReply's).
func answers(onResult ResultFunc) bool {
	if onResult == nil {
		return false
	}
	_, ok := answerFuncs.Load(reflect.ValueOf(onResult).Pointer())
	return ok
}

// repliesWithoutAck reports the mistake of answering requestreply senders
// without acking handler errors: the command would be nacked, redelivered
// and answered again, possibly with another outcome than the sender got.
func repliesWithoutAck(onResult ResultFunc, ack bool) error {
	if ack || !answers(onResult) {
		return nil
	}
	return fmt.Errorf("%w: OnResult answers requestreply senders but AckHandlerErrors is false: "+
		"a failed command would be nacked, redelivered and answered again; use RequestReply.HandlerConfig (or its OnResult, with AckHandlerErrors)",
		errIncompleteRequestReply)
}

// HandlerConfig returns the config of OnHandle for runner
// and the processor's handlers, answering requestreply senders through rr
// and acking handler errors.
func (rr *RequestReply[R]) HandlerConfig(runner *Runner, handlers ...cqrs.CommandHandler) HandlerConfig {
	return HandlerConfig{Runner: runner, OnResult: rr.answerFn, AckHandlerErrors: true, Handlers: handlers}
}

// OnHandle is the one call of a cqrs app: the
// cqrs.CommandProcessorConfig.OnHandle running mws, in this order, around
// handlers (the processor's, as given to its AddHandlers), answering
// requestreply senders through rr. It is OnHandle(rr.HandlerConfig(runner,
// handlers...)) with a Runner of mws and its defaults; build those
// yourself for another RunnerConfig.
func (rr *RequestReply[R]) OnHandle(handlers []cqrs.CommandHandler, mws ...Middleware) (cqrs.CommandProcessorOnHandleFn, error) {
	runner, err := NewRunner(RunnerConfig{Middleware: mws})
	if err != nil {
		return nil, err
	}
	return OnHandle(rr.HandlerConfig(runner, handlers...))
}
