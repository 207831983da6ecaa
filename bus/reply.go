package bus

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/google/uuid"

	"github.com/claimbus/claimbus/internal/wire"
	"github.com/claimbus/claimbus/middleware"
)

// reply is the outcome of one command: its result as JSON, or its error as
// wire.MarshalError encoded it, or a local error (ErrClosed).
type reply struct {
	result []byte
	errb   []byte
	err    error
}

// encodeReply returns the reply of a command whose run returned res, err.
func encodeReply(name string, res any, err error) reply {
	if err != nil {
		return reply{errb: wire.MarshalError(err)}
	}
	b, mErr := marshalResult(res)
	if mErr != nil {
		return reply{errb: wire.MarshalError(fmt.Errorf("bus: cannot encode the result of %s: %w", name, mErr))}
	}
	return reply{result: b}
}

// marshalResult encodes a handler's result. Its MarshalJSON is user code,
// as the handler is: a panic there is an error, not the end of the process.
func marshalResult(res any) (b []byte, err error) {
	if perr := middleware.Recover("result encoder", func() { b, err = json.Marshal(res) }); perr != nil {
		return nil, perr
	}
	return b, err
}

// decodeReply returns the outcome a reply carries, the result decoded into
// an R.
func decodeReply[R any](r reply, id, name string) (R, error) {
	var res R
	if r.err != nil {
		return res, fmt.Errorf("bus: command %s (id %s): %w", name, id, r.err)
	}
	if len(r.errb) > 0 {
		return res, wire.UnmarshalError(r.errb)
	}
	if len(r.result) > 0 {
		if err := json.Unmarshal(r.result, &res); err != nil {
			var zero R
			return zero, fmt.Errorf("%w: command %s (id %s): result into %T: %w", ErrUndecodableReply, name, id, res, err)
		}
	}
	return res, nil
}

// waiters are the Dispatch calls waiting for a reply, by command id.
type waiters struct {
	mu     sync.Mutex
	m      map[string]chan reply
	closed bool // by failAll: no new waiter
}

// add registers a waiter for id.
func (w *waiters) add(id string) (chan reply, error) {
	ch := make(chan reply, 1)
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		return nil, ErrClosed
	}
	if _, dup := w.m[id]; dup {
		w.mu.Unlock()
		return nil, fmt.Errorf("bus: command id %s is already waiting for a reply", id)
	}
	w.m[id] = ch
	w.mu.Unlock()
	return ch, nil
}

// remove unregisters the waiter for id and reports whether it was there.
// When it was not, its reply is in its channel or about to be.
func (w *waiters) remove(id string) bool {
	w.mu.Lock()
	_, ok := w.m[id]
	delete(w.m, id)
	w.mu.Unlock()
	return ok
}

// deliver hands r to the waiter for id, if there is one.
func (w *waiters) deliver(id string, r reply) bool {
	w.mu.Lock()
	ch, ok := w.m[id]
	delete(w.m, id)
	w.mu.Unlock()
	if ok {
		ch <- r // buffered, and only one send per registration
	}
	return ok
}

// failAll hands every waiter a reply with err, and refuses new ones.
func (w *waiters) failAll(err error) {
	w.mu.Lock()
	m := w.m
	w.m = make(map[string]chan reply)
	w.closed = true
	w.mu.Unlock()
	for _, ch := range m {
		ch <- reply{err: err}
	}
}

// failPending hands every waiter a reply with err and returns how many
// there were; unlike failAll it takes new ones afterwards.
func (w *waiters) failPending(err error) int {
	w.mu.Lock()
	m := w.m
	if len(m) == 0 {
		w.mu.Unlock()
		return 0
	}
	w.m = make(map[string]chan reply)
	w.mu.Unlock()
	for _, ch := range m {
		ch <- reply{err: err}
	}
	return len(m)
}

func (w *waiters) len() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.m)
}

// wait waits for the reply of command id, or for ctx to end.
func (b *Bus) wait(ctx context.Context, ch chan reply, id, name string) (reply, error) {
	select {
	case r := <-ch:
		return r, nil
	case <-ctx.Done():
		if b.waiters.remove(id) {
			return reply{}, timeoutError(ctx, id, name)
		}
		// The reply is being handed over: take it.
		return <-ch, nil
	}
}

// receiveReplies routes the messages of the reply subscription to their
// waiters, and acks them; a reply nobody waits for any more is dropped.
func (b *Bus) receiveReplies(ctx context.Context, ch <-chan *message.Message) {
	defer b.replyLoop.Done()
	for {
		select {
		case <-ctx.Done():
			return
		case msg, ok := <-ch:
			if !ok {
				return
			}
			id := msg.Metadata.Get(wire.MetadataCommandID)
			r := reply{result: msg.Payload, errb: wire.ReplyError(msg)}
			if !b.waiters.deliver(id, r) {
				b.logger.Debug("Dropping a reply nobody waits for", watermill.LogFields{"command_id": id})
			}
			msg.Ack()
		}
	}
}

// sendReply hands r to the sender of cmd: in process when the sender is
// this bus, else through the reply publisher. A reply that cannot be
// published is logged: the command is acked anyway, since handling it
// again would not be handling it once.
func (b *Bus) sendReply(cmd *message.Message, replyTo string, r reply) {
	if replyTo == b.replyTopic {
		if !b.waiters.deliver(cmd.UUID, r) {
			b.logger.Debug("Dropping a reply nobody waits for", watermill.LogFields{"command_id": cmd.UUID})
		}
		return
	}
	msg := message.NewMessage(uuid.NewString(), r.result)
	msg.Metadata.Set(wire.MetadataCommandID, cmd.UUID)
	wire.SetReplyError(msg, r.errb)
	ctx, cancel := context.WithTimeout(context.Background(), b.cfg.ReleaseTimeout)
	defer cancel()
	msg.SetContext(ctx)
	if err := b.cfg.ReplyPublisher.Publish(replyTo, msg); err != nil {
		b.logger.Error("Cannot publish a reply", err, watermill.LogFields{"command_id": cmd.UUID, "reply_topic": replyTo})
	}
}
