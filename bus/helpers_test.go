package bus_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"
	"github.com/stretchr/testify/require"

	"github.com/claimbus/claimbus/bus"
	"github.com/claimbus/claimbus/middleware"
)

// Commands of the tests.
type (
	Echo struct{ Text string }
	Fail struct{ Why string }
	// Taken is halted by the takenMiddleware.
	Taken struct{ Email string }
	Block struct{ ID int }
	// Broken cannot be decoded.
	Broken struct{}
	Parent struct{}
	Child  struct{}
	// Orphan has no handler.
	Orphan struct{}
)

func (*Broken) UnmarshalJSON([]byte) error { return errors.New("broken on purpose") }

type EchoResult struct{ Text string }

// mode is a way to run a bus: in process or over a transport.
type mode struct {
	name string
	cfg  func(t *testing.T) bus.Config
}

// modes are the configurations every round-trip test runs in.
var modes = []mode{
	{"in-process", func(*testing.T) bus.Config { return bus.Config{} }},
	{"gochannel", func(t *testing.T) bus.Config {
		ps := newGoChannel(t)
		return bus.Config{Publisher: ps, Subscriber: ps}
	}},
}

// inEachMode runs test as a parallel subtest in every mode, with the
// mode's configuration.
func inEachMode(t *testing.T, test func(t *testing.T, cfg bus.Config)) {
	t.Helper()
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			t.Parallel()
			test(t, m.cfg(t))
		})
	}
}

// newGoChannel returns a GoChannel closed when the test ends.
func newGoChannel(t testing.TB) *gochannel.GoChannel {
	ps := gochannel.NewGoChannel(gochannel.Config{}, nil)
	t.Cleanup(func() { require.NoError(t, ps.Close()) })
	return ps
}

// takenMiddleware halts Taken commands with an already_taken rejection
// naming the email field.
var takenMiddleware = middleware.Hooks{Before: func(_ context.Context, p *middleware.Pipeline) {
	if _, ok := p.Command.(*Taken); ok {
		p.Halt(middleware.Reject(middleware.CodeAlreadyTaken, "email", "email is already taken"))
	}
}}

// startBus returns a started bus for cfg with the handlers reg registers,
// closed when the test ends.
func startBus(t testing.TB, cfg bus.Config, reg func(b *bus.Bus)) *bus.Bus {
	t.Helper()
	b, err := bus.New(cfg)
	require.NoError(t, err)
	if reg != nil {
		reg(b)
	}
	require.NoError(t, b.Start(context.Background()))
	t.Cleanup(func() { require.NoError(t, b.Close()) })
	return b
}

// eventually polls cond until it holds or a deadline passes.
func eventually(t testing.TB, cond func() bool, msg string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting: %s", msg)
		}
		time.Sleep(time.Millisecond)
	}
}

// ackRecorder wraps a Subscriber and records the messages it hands out,
// so that a test can see whether each was acked or nacked.
type ackRecorder struct {
	message.Subscriber
	mu   sync.Mutex
	msgs []*message.Message
	wg   sync.WaitGroup
}

func (r *ackRecorder) Subscribe(ctx context.Context, topic string) (<-chan *message.Message, error) {
	in, err := r.Subscriber.Subscribe(ctx, topic)
	if err != nil {
		return nil, err
	}
	out := make(chan *message.Message)
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		defer close(out)
		for msg := range in {
			r.mu.Lock()
			r.msgs = append(r.msgs, msg)
			r.mu.Unlock()
			select {
			case out <- msg:
			case <-ctx.Done():
				return
			}
		}
	}()
	return out, nil
}

// delivered returns the messages handed out so far.
func (r *ackRecorder) delivered() []*message.Message {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]*message.Message(nil), r.msgs...)
}

// requireAckedOnce waits until exactly one message was delivered and acked,
// and checks it was never nacked.
func requireAckedOnce(t *testing.T, r *ackRecorder) {
	t.Helper()
	eventually(t, func() bool { return len(r.delivered()) >= 1 }, "a delivery")
	msgs := r.delivered()
	require.Len(t, msgs, 1, "delivered more than once")
	select {
	case <-msgs[0].Acked():
	case <-msgs[0].Nacked():
		t.Fatal("the command was nacked")
	case <-time.After(10 * time.Second):
		t.Fatal("the command was never acked")
	}
}
