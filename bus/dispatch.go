package bus

import (
	"context"
	"fmt"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/claimbus/claimbus/internal/wire"
	"github.com/claimbus/claimbus/middleware"
)

// Dispatch sends cmd to its handler and waits for the outcome: the
// handler's result decoded into an R, its error, or the rejection of a
// halted command, with a zero R. Errors come back as data, so
// errors.Is(err, middleware.ErrAlreadyTaken) and errors.As(err,
// &rejection) hold whichever node handled the command; any other handler
// error is a *middleware.RemoteError carrying its message.
//
// The command's UUID is new; its correlation and causation ids come from
// ctx (middleware.IDsFromContext): inside a handler, a dispatched command
// keeps the correlation id and is caused by the command being handled.
// Otherwise it starts a correlation of its own.
//
// When ctx ends first, Dispatch returns an error naming the command and
// its id, matching ctx's error and middleware.ErrTimeout, and leaves nothing
// pending: a late reply is dropped. A command whose handler has not started
// by then never starts it: ctx's deadline travels with the command
// (metadata claimbus_deadline), the middleware's BeforeDispatch hooks get a context
// that ends at it (so a claim or lock wait ends with it), and the runner
// skips the handler once it has passed; in process, ctx's cancellation
// does the same. A handler that has started runs to its end, and its
// outcome, if late, is dropped. Over a transport the deadline is read by
// the clock of the node that handles the command.
//
// Dispatch fails with ErrNotStarted before Start, ErrClosed after Close,
// and, on an in-process bus, ErrNoHandler for a command without a handler
// (through a transport, such a command waits for a handler until ctx
// ends).
func Dispatch[R any](ctx context.Context, b *Bus, cmd any) (R, error) {
	r, id, name, err := b.dispatch(ctx, cmd)
	if err != nil {
		var zero R
		return zero, err
	}
	return decodeReply[R](r, id, name)
}

// dispatch sends cmd and waits for its reply.
func (b *Bus) dispatch(ctx context.Context, cmd any) (r reply, id, name string, err error) {
	msg, name, err := b.newMessage(ctx, cmd)
	if err != nil {
		return reply{}, "", name, err
	}
	id = msg.UUID
	if err := ctx.Err(); err != nil {
		return reply{}, id, name, timeoutError(ctx, id, name)
	}
	if d, ok := ctx.Deadline(); ok {
		msg.Metadata.Set(wire.MetadataDeadline, d.UTC().Format(time.RFC3339Nano))
	}
	ch, err := b.waiters.add(id)
	if err != nil {
		return reply{}, id, name, err
	}
	if b.local {
		err = b.handleLocal(ctx, msg, name, ctx, id)
	} else {
		msg.Metadata.Set(wire.MetadataReplyTo, b.replyTopic)
		err = b.publish(ctx, msg, name)
	}
	if err != nil {
		b.waiters.remove(id)
		if ctx.Err() != nil {
			// The deadline passed while publishing (a slow first publish
			// that creates its topic's table, say): a timeout like any.
			err = fmt.Errorf("%w (while publishing: %w)", timeoutError(ctx, id, name), err)
		}
		return reply{}, id, name, err
	}
	r, err = b.wait(ctx, ch, id, name)
	return r, id, name, err
}

// Send sends cmd to its handler and returns once it is handed over (on an
// in-process bus: once a handler slot is free; through a transport: once
// it is published). Nobody waits for the outcome: a handler error is
// logged by the node that handles it. Ids are set as by Dispatch.
func (b *Bus) Send(ctx context.Context, cmd any) error {
	msg, name, err := b.newMessage(ctx, cmd)
	if err != nil {
		return err
	}
	if b.local {
		return b.handleLocal(ctx, msg, name, nil, "")
	}
	return b.publish(ctx, msg, name)
}

// newMessage checks the bus can send, and encodes cmd with its ids.
func (b *Bus) newMessage(ctx context.Context, cmd any) (*message.Message, string, error) {
	if cmd == nil {
		return nil, "", ErrNilCommand
	}
	if err := b.errState(); err != nil {
		return nil, "", err
	}
	name := b.cfg.Marshaler.Name(cmd)
	if b.local && b.handlers[name] == nil {
		return nil, name, fmt.Errorf("%w: %s", ErrNoHandler, name)
	}
	msg, err := b.cfg.Marshaler.Marshal(cmd)
	if err != nil {
		return nil, name, fmt.Errorf("bus: cannot encode %s: %w", name, err)
	}
	if msg.UUID == "" {
		return nil, name, fmt.Errorf("bus: the marshaler gave %s no message UUID", name)
	}
	ids, _ := middleware.IDsFromContext(ctx)
	if ids.CorrelationID == "" {
		ids.CorrelationID = msg.UUID
	}
	msg.Metadata.Set(wire.MetadataCorrelationID, ids.CorrelationID)
	if ids.CausationID != "" {
		msg.Metadata.Set(wire.MetadataCausationID, ids.CausationID)
	}
	if b.cfg.OnSend != nil {
		b.cfg.OnSend(ctx, msg)
	}
	return msg, name, nil
}

// publish publishes msg on the topic of command name.
func (b *Bus) publish(ctx context.Context, msg *message.Message, name string) error {
	topic, ok := b.topics.Load(name)
	if !ok {
		topic, _ = b.topics.LoadOrStore(name, b.cfg.CommandTopic(name))
	}
	msg.SetContext(ctx)
	if err := b.cfg.Publisher.Publish(topic.(string), msg); err != nil {
		return fmt.Errorf("bus: publish %s (id %s): %w", name, msg.UUID, err)
	}
	return nil
}

// handleLocal runs msg through its handler on a worker of the bus, and
// hands its reply to the waiter registered under waiter, if not empty (a
// Dispatch's, by command id). It returns once a worker took it, or ctx ended
// first. sender, when not nil, is the context of the Dispatch waiting for
// the outcome: once it ends, the handler no longer starts.
func (b *Bus) handleLocal(ctx context.Context, msg *message.Message, name string, sender context.Context, waiter string) error {
	if err := b.begin(); err != nil {
		return err
	}
	if !b.workers.submit(job{msg: msg, local: true, sender: sender, waiter: waiter}, ctx.Done()) {
		b.inflight.Done()
		return timeoutError(ctx, msg.UUID, name)
	}
	return nil
}

// runJob runs j on a worker: a command sent in process, whose outcome goes
// to its waiting Dispatch (or is dropped), or one from a subscription.
func (b *Bus) runJob(j job) {
	defer b.inflight.Done()
	if !j.local {
		b.handleMessage(j.msg)
		return
	}
	b.processThen(j.msg, j.sender, func(r reply, poison string) {
		if j.waiter != "" {
			b.waiters.deliver(j.waiter, r)
			return
		}
		b.dropped(j.msg, poison)
	})
}

// receiveCommands hands the messages of one command subscription to
// handler goroutines, until Close.
func (b *Bus) receiveCommands(ch <-chan *message.Message) {
	defer b.loops.Done()
	for {
		select {
		case <-b.stopLoops:
			return
		case msg, ok := <-ch:
			if !ok {
				return
			}
			b.inflight.Add(1)
			if !b.workers.submit(job{msg: msg}, b.stopLoops) {
				// Left unacked: the subscription's end gives it back to
				// the transport.
				b.inflight.Done()
				return
			}
		}
	}
}

// handleMessage handles a command from a subscription, replies, then acks.
func (b *Bus) handleMessage(msg *message.Message) {
	b.processThen(msg, nil, func(r reply, poison string) {
		if replyTo := msg.Metadata.Get(wire.MetadataReplyTo); replyTo != "" {
			b.sendReply(msg, replyTo, r)
		} else {
			b.dropped(msg, poison)
		}
		msg.Ack()
	})
}

// processThen processes msg (see process for sender) and hands its reply
// to deliver, also when the handler ends the goroutine with
// runtime.Goexit: deliver is deferred.
func (b *Bus) processThen(msg *message.Message, sender context.Context, deliver func(r reply, poison string)) {
	var r reply
	var poison string
	processed := false
	defer func() {
		if !processed {
			r = goexitReply(msg)
		}
		deliver(r, poison)
	}()
	r, poison = b.process(msg, sender)
	processed = true
}

// goexitReply is the reply of a command whose run ended its goroutine with
// runtime.Goexit (t.FailNow in a handler, say): the sender gets an error
// instead of waiting until its ctx ends.
func goexitReply(msg *message.Message) reply {
	return reply{errb: wire.MarshalError(fmt.Errorf("bus: command %s (id %s) ended its goroutine with runtime.Goexit",
		msg.Metadata.Get(wire.MetadataCommandName), msg.UUID))}
}

// dropped deals with the outcome of a command nobody waits for: a poison
// message goes to the poison topic or the log.
func (b *Bus) dropped(msg *message.Message, poison string) {
	fields := watermill.LogFields{"command_id": msg.UUID, "command_name": msg.Metadata.Get(wire.MetadataCommandName)}
	switch {
	case poison != "" && b.cfg.PoisonTopic != "":
		pm := msg.Copy()
		pm.Metadata.Set(wire.MetadataPoisonReason, poison)
		if err := b.cfg.Publisher.Publish(b.cfg.PoisonTopic, pm); err != nil {
			b.logger.Error("Cannot publish a poison message; dropping it", err, fields)
		}
	case poison != "":
		b.logger.Error("Dropping a command that cannot be handled", nil, fields.Add(watermill.LogFields{"reason": poison}))
	}
	// A command that ran and failed is logged by the runner (FailureLog).
}
