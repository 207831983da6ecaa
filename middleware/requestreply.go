package middleware

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"sync"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/components/requestreply"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/claimbus/claimbus/internal/wire"
)

// MetadataError is the metadata key of a reply's error in its wire form: the
// same key as bus.MetadataError, so that bus replies and requestreply replies
// encode a rejection alike. ReplyMarshaler also reads the key its replies
// had before ("_claimbus_error"), so that replies of a node not yet
// upgraded keep their rejections.
const MetadataError = wire.MetadataError

// ReplyMarshaler is a requestreply.BackendPubsubMarshaler that keeps a
// reply's error as data: a *Rejection comes back as a *Rejection, so that
// errors.Is(reply.Error, ErrAlreadyTaken) and errors.As hold for callers of
// requestreply.SendWithReply; any other error comes back as a *RemoteError
// with its message. The result travels as JSON in the payload. Its replies
// also carry Watermill's own error keys, so a sender using
// requestreply.BackendPubsubJSONMarshaler still reads the error's message.
type ReplyMarshaler[R any] struct{}

var _ requestreply.BackendPubsubMarshaler[struct{}] = ReplyMarshaler[struct{}]{}

// MarshalReply encodes the handler's result and error as a reply message.
func (ReplyMarshaler[R]) MarshalReply(params requestreply.BackendOnCommandProcessedParams[R]) (*message.Message, error) {
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
func (ReplyMarshaler[R]) UnmarshalReply(msg *message.Message) (requestreply.Reply[R], error) {
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

// ReplyUnhandled returns a ResultFunc that answers the senders waiting
// through backend (requestreply.SendWithReply) for the commands whose
// handler did not return: halted by a hook, skipped because the context
// was done, or rejected undecodable. A handler that returned has answered
// through backend already: Watermill's requestreply.NewCommandHandler and
// NewCommandHandlerWithResult reply after the handler function, so wrap
// those (WrapHandler, OnHandle, RouterMiddleware) and give the adapter this
// ResultFunc. Without it, a halted command's sender waits until its context
// ends.
//
// The reply carries the command's error (use ReplyMarshaler so that a
// rejection stays a *Rejection) and the response when it is an R. Messages
// sent without waiting (no operation id) get no reply. A reply that cannot
// be published is an error: the adapter nacks the command, which comes
// again and is answered again.
//
// NewRequestReply sets all of this up in one call; a config that uses this
// ResultFunc without AckHandlerErrors is refused by its Validate.
func ReplyUnhandled[R any](backend requestreply.Backend[R]) ResultFunc {
	f := func(ctx context.Context, msg *message.Message, result any, err error) error {
		var cmd any
		if p, ok := PipelineFromContext(ctx); ok {
			if p.Handled() {
				return nil
			}
			cmd = p.Command
		}
		if msg == nil || msg.Metadata.Get(requestreply.OperationIDMetadataKey) == "" {
			return nil
		}
		res, _ := result.(R)
		perr := backend.OnCommandProcessed(ctx, requestreply.BackendOnCommandProcessedParams[R]{
			Command:        cmd,
			CommandMessage: msg,
			HandlerResult:  res,
			HandleErr:      err,
		})
		// The PubSubBackend returns the command's own error to nack it
		// unless told to ack: the adapter decides that, not the reply.
		if perr != nil && (err == nil || !errors.Is(perr, err)) {
			return fmt.Errorf("middleware: cannot answer command %s: %w", msg.UUID, perr)
		}
		return nil
	}
	replyUnhandledFuncs.Store(reflect.ValueOf(f).Pointer(), struct{}{})
	return f
}

// replyUnhandledFuncs holds the code pointers of the functions
// ReplyUnhandled returns (one per instantiation shape), so that Validate
// can tell one from other ResultFuncs.
var replyUnhandledFuncs sync.Map

// repliesWithoutAck reports the mistake of answering requestreply senders
// (ReplyUnhandled) without acking handler errors: the command is nacked,
// redelivered and answered again, forever on GoChannel.
func repliesWithoutAck(onResult ResultFunc, ack bool) error {
	if onResult == nil || ack {
		return nil
	}
	if _, ok := replyUnhandledFuncs.Load(reflect.ValueOf(onResult).Pointer()); !ok {
		return nil
	}
	return fmt.Errorf("%w: OnResult answers requestreply senders (ReplyUnhandled) but AckHandlerErrors is false: "+
		"a failed command would be nacked, redelivered and answered again; set AckHandlerErrors, or build the config with NewRequestReply",
		ErrIncompleteRequestReply)
}

// RequestReply is this package set up for Watermill's requestreply in one
// call: a PubSubBackend whose replies keep rejections as data
// (ReplyMarshaler) and that acks handler errors (they are answers), and
// adapter configs that answer the senders of halted commands
// (ReplyUnhandled) and ack handler errors (AckHandlerErrors). Leaving out
// any of the three makes senders get plain errors, wait until their
// deadline, or get answered again on each redelivery.
type RequestReply[R any] struct {
	backend *requestreply.PubSubBackend[R]
}

// NewRequestReply returns the requestreply set-up whose backend is built
// from cfg, with ReplyMarshaler[R] and cfg.AckCommandErrors set. Use its
// Backend with requestreply.NewCommandHandlerWithResult and
// requestreply.SendWithReply, and its HandlerConfig or RouterConfig for the
// adapters.
func NewRequestReply[R any](cfg requestreply.PubSubBackendConfig) (*RequestReply[R], error) {
	cfg.AckCommandErrors = true
	b, err := requestreply.NewPubSubBackend[R](cfg, ReplyMarshaler[R]{})
	if err != nil {
		return nil, fmt.Errorf("middleware: NewRequestReply: %w", err)
	}
	return &RequestReply[R]{backend: b}, nil
}

// Backend is the requestreply backend, for requestreply's handlers and
// senders.
func (rr *RequestReply[R]) Backend() *requestreply.PubSubBackend[R] { return rr.backend }

// HandlerConfig returns the config of OnHandle or WrapHandler for runner,
// answering the senders of halted commands and acking handler errors.
func (rr *RequestReply[R]) HandlerConfig(runner *Runner) HandlerConfig {
	return HandlerConfig{Runner: runner, OnResult: ReplyUnhandled[R](rr.backend), AckHandlerErrors: true}
}

// RouterConfig returns the config of RouterMiddleware for runner and
// registry, answering the senders of halted commands and acking handler
// errors. Set its other fields (RejectUnknown, Logger) as needed.
func (rr *RequestReply[R]) RouterConfig(runner *Runner, registry *Registry) RouterConfig {
	return RouterConfig{Runner: runner, Registry: registry, OnResult: ReplyUnhandled[R](rr.backend), AckHandlerErrors: true}
}
