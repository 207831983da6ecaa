package bus_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"

	"github.com/claimbus/claimbus/bus"
	"github.com/claimbus/claimbus/middleware"
)

// slowPublisher is a Publisher whose Publish waits until the message's
// context ends, then fails, as a first publish creating its topic's table
// on a slow database does.
type slowPublisher struct{ message.Publisher }

func (p slowPublisher) Publish(_ string, msgs ...*message.Message) error {
	<-msgs[0].Context().Done()
	return fmt.Errorf("creating the topic: %w", msgs[0].Context().Err())
}

// A deadline that passes while the command is being published is a
// timeout too: an error matching middleware.ErrTimeout, naming the
// command, with nothing left pending.
func TestDeadlineDuringPublishIsATimeout(t *testing.T) {
	t.Parallel()
	ps := newGoChannel(t)
	b := startBus(t, bus.Config{Publisher: slowPublisher{ps}, Subscriber: ps, ReplyPublisher: ps, ReplySubscriber: ps}, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	_, err := bus.Dispatch[string](ctx, b, &Echo{Text: "x"})
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.ErrorIs(t, err, middleware.ErrTimeout)
	require.Regexp(t, `no reply to command bus_test.Echo \(id [0-9a-f-]{36}\)`, err.Error())
	require.Zero(t, b.Pending())
}
