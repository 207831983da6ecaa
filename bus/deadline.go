package bus

import (
	"context"
	"fmt"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/claimbus/claimbus/internal/wire"
	"github.com/claimbus/claimbus/middleware"
)

// A Dispatch's sender stops waiting when its ctx ends: at its deadline,
// which travels with the command (metadata claimbus_deadline), or, in process, when
// it is cancelled. A command whose handler has not started by then is not
// applied (see Dispatch).

// hookContext returns the context of the BeforeDispatch hooks of msg's
// run, which the runner also checks before it starts the handler: the
// bus's run context, ended at the deadline msg carries (metadata claimbus_deadline)
// and, when sender is not nil, once sender ends. Nobody waits for an
// outcome past either, so the handler is not started (see Dispatch); the
// last hook of every run, senderGone, checks both again by the clock, so
// that a timer that has not fired yet cannot let it start. The handler's
// own context, p.Context(), is not bounded by them: a handler that started
// runs to its end. A deadline that does not parse is ignored.
func (b *Bus) hookContext(msg *message.Message, sender context.Context) (context.Context, func()) {
	var deadline time.Time
	ctx, stops := b.runCtx, []func(){}
	if v := msg.Metadata.Get(wire.MetadataDeadline); v != "" {
		if d, err := time.Parse(time.RFC3339Nano, v); err == nil {
			var cancel context.CancelFunc
			ctx, cancel = context.WithDeadline(ctx, d)
			deadline = d
			stops = append(stops, cancel)
		}
	}
	if sender != nil && sender.Done() != nil {
		var cancel context.CancelCauseFunc
		ctx, cancel = context.WithCancelCause(ctx)
		unhook := context.AfterFunc(sender, func() { cancel(context.Cause(sender)) })
		stops = append(stops, func() { unhook(); cancel(nil) })
	}
	if len(stops) == 0 {
		// Nothing can end the sender's wait: no senderState to check.
		return ctx, func() {}
	}
	st := &senderState{deadline: deadline, sender: sender}
	return context.WithValue(ctx, senderKey{}, st), func() {
		for _, stop := range stops {
			stop()
		}
	}
}

// senderKey is the context key of a run's senderState.
type senderKey struct{}

// senderState is what a run knows of the sender waiting for its outcome.
type senderState struct {
	deadline time.Time       // zero: none
	sender   context.Context // in process; nil otherwise
}

// gone returns why the sender no longer waits, or nil.
func (s *senderState) gone() error {
	if s.sender != nil && s.sender.Err() != nil {
		return context.Cause(s.sender)
	}
	if !s.deadline.IsZero() && !time.Now().Before(s.deadline) {
		return context.DeadlineExceeded
	}
	return nil
}

// senderGone is the bus's last middleware: it halts a command whose sender
// no longer waits for its outcome (see hookContext), so that its handler
// does not start.
type senderGone struct{}

func (senderGone) BeforeDispatch(ctx context.Context, p *middleware.Pipeline) {
	if st, ok := ctx.Value(senderKey{}).(*senderState); ok {
		if err := st.gone(); err != nil {
			p.Halt(fmt.Errorf("bus: command %s %s not handled: its sender no longer waits: %w", p.CommandName, p.CommandUUID, err))
		}
	}
}

func (senderGone) AfterDispatch(context.Context, *middleware.Pipeline) {}
func (senderGone) AfterFailure(context.Context, *middleware.Pipeline)  {}
