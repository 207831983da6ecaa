package bus

import (
	"fmt"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/claimbus/claimbus/middleware"
)

// LossNotifier is an optional interface of a Config.ReplySubscriber whose
// transport can tell when the commands and replies in flight may be lost
// or stuck: its connection to the broker or database dropped (a crashed
// server forgets the commits it had not made durable, with
// synchronous_commit off or an asynchronous replica promoted, and a
// stopped one keeps every message where it is). Without it, a sender whose
// command or reply was lost waits until its ctx ends.
//
// A bus registers with it at Start and unregisters at Close. Each time the
// transport calls f, every Dispatch then waiting for its reply returns at
// once with an error matching middleware.ErrUnavailable and
// middleware.ErrOutcomeUnknown, the cause wrapped beside them; a Dispatch that
// starts afterwards waits as usual, and a late reply to a failed one is
// dropped. The command itself may still be handled: an honest "try
// again" needs a command whose replay is safe. f does not block; the
// transport may call it from any goroutine.
type LossNotifier interface {
	NotifyLoss(f func(cause error)) (stop func())
}

// lost fails every Dispatch waiting for a reply, after the transport
// reported cause (see LossNotifier).
func (b *Bus) lost(cause error) {
	n := b.waiters.failPending(fmt.Errorf("%w: %w: %w", errLostInFlight, middleware.ErrOutcomeUnknown, cause))
	if n > 0 {
		b.logger.Info("The transport lost its connection: commands waiting for a reply answered unavailable",
			watermill.LogFields{"waiting": n, "cause": cause.Error()})
	}
}
