package bus

import (
	"context"
	"errors"
	"fmt"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/claimbus/claimbus/internal/wire"
	"github.com/claimbus/claimbus/middleware"
)

// entry is the handler of one command name; the command's type is in the
// bus's Registry, which decodes it.
type entry struct {
	name  string
	topic string
	call  middleware.HandlerFunc
}

// Handle registers h as the handler of commands of type C, under the name
// the bus's marshaler gives a *C. It fails with ErrDuplicateHandler when
// that name already has a handler, and with ErrStarted once the bus has
// started.
//
// h gets a *C decoded from the command message, and the context of the
// pipeline run (middleware.Pipeline.Context), which carries the command's
// ids (middleware.IDsFromContext): a command h dispatches with it inherits
// the correlation id and is caused by this command. It is not the
// message's context: the transport's own transaction, if any, is not in it,
// so h writes through its own pool or transaction and its writes commit
// before the after hooks release the claims. The bus cancels it only when
// Close gives up waiting (Config.CloseTimeout).
//
// h's result travels to the sender as JSON, and its error as
// the wire encoding of errors gives it: a *middleware.Rejection stays one,
// any other error arrives as a *middleware.RemoteError with its message.
// Either way the command is acked: an error is an answer, not a
// redelivery.
func Handle[C, R any](b *Bus, h func(ctx context.Context, cmd *C) (R, error)) error {
	if h == nil {
		return errors.New("bus: Handle: nil handler")
	}
	name := b.cfg.Marshaler.Name(new(C))
	if name == "" {
		return fmt.Errorf("bus: Handle: the marshaler gives %T an empty name", new(C))
	}
	e := &entry{
		name:  name,
		topic: b.cfg.CommandTopic(name),
		call: func(ctx context.Context, p *middleware.Pipeline) (any, error) {
			cmd, ok := p.Command.(*C)
			if !ok {
				return nil, fmt.Errorf("bus: handler of %s got a %T, want %T", name, p.Command, cmd)
			}
			return h(ctx, cmd)
		},
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	switch b.state {
	case stateRunning:
		return fmt.Errorf("%w: cannot add a handler for %s", ErrStarted, name)
	case stateClosed:
		return ErrClosed
	}
	if _, dup := b.handlers[name]; dup {
		return fmt.Errorf("%w: %s", ErrDuplicateHandler, name)
	}
	if err := b.registry.AddName(name, new(C)); err != nil {
		return fmt.Errorf("bus: Handle: %w", err)
	}
	b.handlers[name] = e
	return nil
}

// process decodes msg with the bus's Registry, runs it through the
// middleware and its handler, and returns its reply. An unknown name or an
// undecodable payload is the Registry's invalid rejection, with poison set
// to its message. sender, when not nil, is the context of the Dispatch in
// this process that waits for the outcome (see hookContext).
func (b *Bus) process(msg *message.Message, sender context.Context) (r reply, poison string) {
	p, err := b.registry.Pipeline(msg)
	if err != nil {
		return reply{errb: wire.MarshalError(err)}, err.Error()
	}
	e := b.handlers[p.CommandName]
	p.SetContext(b.runCtx) // the run's, not the message's
	ctx, stop := b.hookContext(msg, sender)
	defer stop()
	res, err := b.runner.Run(ctx, p, e.call)
	return encodeReply(p.CommandName, res, err), ""
}
