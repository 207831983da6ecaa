package middleware

import (
	"cmp"
	"context"

	"github.com/claimbus/claimbus/internal/wire"

	"github.com/ThreeDotsLabs/watermill/message"
)

// ResultFunc receives the outcome of one command an adapter ran: msg is the
// command message, result the pipeline's response and err the command's
// error (the halt reason, the handler's error or a recovered panic; nil on
// success and for a command halted with a nil error). It is called once per
// run, after the last after hook, halted runs and undecodable messages
// included, with a context that the sender going away does not cancel and
// that carries the run's pipeline (see PipelineFromContext; an undecodable
// message has none). Use it to answer a sender that waits.
//
// A non-nil error from it is returned to the router, which nacks the
// message so that it comes again (and the answer is sent again).
type ResultFunc func(ctx context.Context, msg *message.Message, result any, err error) error

// newMessagePipeline returns a pipeline for cmd, named name, decoded from
// msg (see Registry.Pipeline).
func newMessagePipeline(msg *message.Message, cmd any, name string) *Pipeline {
	return &Pipeline{
		Command:       cmd,
		CommandName:   name,
		CommandUUID:   msg.UUID,
		CorrelationID: cmp.Or(msg.Metadata.Get(wire.MetadataCorrelationID), msg.UUID),
		CausationID:   msg.Metadata.Get(wire.MetadataCausationID),
		Metadata:      msg.Metadata,
		ctx:           msg.Context(),
	}
}

// outcome is what an adapter does with a run: the error to hand the router
// (nil acks the message).
type outcome struct {
	onResult         ResultFunc
	ackHandlerErrors bool
	answers          bool // onResult answers requestreply senders
}

func newOutcome(onResult ResultFunc, ackHandlerErrors bool) outcome {
	return outcome{onResult: onResult, ackHandlerErrors: ackHandlerErrors, answers: answers(onResult)}
}

// run carries p through runner and h, calls onResult in the after hooks'
// context, and returns the error the router gets: the ResultFunc's error;
// nil for a halted command; the command's error unless ackHandlerErrors.
func (o outcome) run(ctx context.Context, r *Runner, msg *message.Message, p *Pipeline, h HandlerFunc) error {
	var resErr error
	p.answers = o.answers
	_, err := r.run(ctx, p, h, func(actx context.Context) {
		res, _ := p.Response()
		resErr = o.result(actx, msg, res, p.err)
	})
	switch {
	case resErr != nil:
		return resErr
	case p.halted, err == nil, o.ackHandlerErrors:
		return nil
	}
	return err
}

// result calls onResult, if any, recovering its panic as an error.
func (o outcome) result(ctx context.Context, msg *message.Message, res any, err error) error {
	if o.onResult == nil {
		return nil
	}
	var rerr error
	if perr := Recover("ResultFunc", func() { rerr = o.onResult(ctx, msg, res, err) }); perr != nil {
		return perr
	}
	return rerr
}

// invalidMessage is the rejection of a message that is not a command the
// adapter can run.
func invalidMessage(err error) error {
	return &causedRejection{Rejection: &Rejection{Code: CodeInvalid, Message: err.Error()}, cause: err}
}
