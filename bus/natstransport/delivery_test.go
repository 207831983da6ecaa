package natstransport_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/claimbus/claimbus/bus"
	"github.com/claimbus/claimbus/bus/natstransport"
	"github.com/claimbus/claimbus/commands"
	"github.com/claimbus/claimbus/internal/natstest"
	"github.com/claimbus/claimbus/lockstore"
	"github.com/claimbus/claimbus/middleware"
	"github.com/claimbus/claimbus/uniqueness"
)

// A nacked message is delivered again at once, not after AckWait.
func TestNackRedeliversAtOnce(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	tr, err := natstransport.New(context.Background(), srv.URL(), natstransport.Config{NodeID: "n", AckWait: time.Hour})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, tr.Close()) })
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ch, err := tr.BusConfig(bus.Config{}).Subscriber.Subscribe(ctx, "t")
	require.NoError(t, err)
	sent := message.NewMessage(uuid.NewString(), []byte("again"))
	sent.Metadata.Set("k", "v")
	require.NoError(t, tr.BusConfig(bus.Config{}).Publisher.Publish("t", sent))

	receive := func() *message.Message {
		t.Helper()
		select {
		case msg := <-ch:
			return msg
		case <-time.After(20 * time.Second):
			t.Fatal("no message")
			return nil
		}
	}
	first := receive()
	require.Equal(t, sent.UUID, first.UUID)
	require.Equal(t, "v", first.Metadata.Get("k"))
	first.Nack()
	second := receive()
	require.Equal(t, sent.UUID, second.UUID)
	require.Equal(t, "again", string(second.Payload))
	second.Ack()
	in := inspect(t, srv.URL())
	eventually(t, func() bool { return in.unsettled(tr, "t") == 0 && in.stored(tr, "t") == 0 }, "the ack")
}

// A node whose transport closes while its handler runs (it goes away
// without closing its bus first) hands the command back: another node
// handles it at once, long before AckWait.
func TestTransportCloseHandsBackInFlight(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	cfg := natstransport.Config{AckWait: time.Hour}
	started := make(chan struct{})
	release := make(chan struct{})
	defer close(release)
	b := newNode(t, srv.URL(), "node-b", cfg, bus.Config{}, func(b *bus.Bus) {
		require.NoError(t, bus.Handle(b, func(_ context.Context, c *Block) (string, error) {
			close(started)
			<-release
			return "node-b", nil
		}))
	})
	a := newNode(t, srv.URL(), "node-a", cfg, bus.Config{}, nil)
	type result struct {
		got string
		err error
	}
	done := make(chan result, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		got, err := bus.Dispatch[string](ctx, a.bus, &Block{ID: 1})
		done <- result{got, err}
	}()
	<-started
	newNode(t, srv.URL(), "node-c", cfg, bus.Config{}, func(b *bus.Bus) {
		require.NoError(t, bus.Handle(b, func(_ context.Context, c *Block) (string, error) { return "node-c", nil }))
	})
	require.NoError(t, b.tr.Close())
	r := <-done
	require.NoError(t, r.err)
	require.Equal(t, "node-c", r.got)
}

// Closing the bus, then the transport, while a handler runs: the handler
// finishes, its reply goes out, its command is acked (deleted from the
// stream, so it can never be delivered again) before the transport closes.
func TestCloseBusFirstAcksInFlight(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	cfg := natstransport.Config{AckWait: 300 * time.Millisecond}
	started := make(chan struct{})
	release := make(chan struct{})
	var runs atomic.Int32
	b := newNode(t, srv.URL(), "node-b", cfg, bus.Config{}, func(b *bus.Bus) {
		require.NoError(t, bus.Handle(b, func(_ context.Context, c *Block) (int, error) {
			runs.Add(1)
			close(started)
			<-release
			return c.ID, nil
		}))
	})
	a := newNode(t, srv.URL(), "node-a", cfg, bus.Config{}, nil)
	done := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		got, err := bus.Dispatch[int](ctx, a.bus, &Block{ID: 7})
		if err == nil && got != 7 {
			err = fmt.Errorf("got %d", got)
		}
		done <- err
	}()
	<-started
	closed := make(chan error, 1)
	go func() { closed <- b.bus.Close() }()
	// Close has begun (Send then fails with ErrClosed) while the handler
	// still runs: it must wait for the handler and its ack. The probe
	// cannot be encoded, so it is never published while the bus is open.
	unencodable := &struct{ C chan int }{}
	eventually(t, func() bool { return errors.Is(b.bus.Send(context.Background(), unencodable), bus.ErrClosed) }, "the bus closing")
	close(release)
	require.NoError(t, <-closed)
	require.NoError(t, b.tr.Close())
	require.NoError(t, <-done)

	in := inspect(t, srv.URL())
	topic := "command.natstransport_test.Block"
	require.Zero(t, in.unsettled(b.tr, topic), "nothing pending nor awaiting an ack")
	require.Zero(t, in.stored(b.tr, topic), "the command is gone from the stream")
	require.EqualValues(t, 1, runs.Load())
}

// 200 sign-ups of 20 addresses, dispatched from two nodes and handled by
// whichever takes them, with the Uniqueness middleware on one lock store:
// exactly one member per address, every other sign-up already_taken.
func TestDuplicateStormAcrossTwoNodes(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	store, err := lockstore.NewMemory(lockstore.MemoryConfig{})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, store.Close()) })
	var (
		mu        sync.Mutex
		staff     = map[string]string{} // normalised email → staff id
		backstops atomic.Int32
	)
	taken := func(_ context.Context, email string) (bool, error) {
		mu.Lock()
		defer mu.Unlock()
		_, ok := staff[email]
		return ok, nil
	}
	reg := func(b *bus.Bus) {
		require.NoError(t, bus.Handle(b, func(_ context.Context, c *commands.CreateStaff) (string, error) {
			mu.Lock()
			defer mu.Unlock()
			email := uniqueness.NormalizeEmail(c.Email)
			if _, dup := staff[email]; dup {
				backstops.Add(1)
				return "", errors.New("unique index violated")
			}
			staff[email] = c.StaffID
			return c.StaffID, nil
		}))
	}
	mws := func() []middleware.Middleware {
		unique, err := uniqueness.New(uniqueness.Config{
			Locker: store,
			Rules: []uniqueness.Rule{uniqueness.Field(uniqueness.Names{Field: "email", Scope: "staff.email"},
				func(c *commands.CreateStaff) string { return c.Email }, taken,
				uniqueness.Normalize(uniqueness.NormalizeEmail))},
		})
		require.NoError(t, err)
		return []middleware.Middleware{middleware.Validate(), unique}
	}
	nodes := []*node{
		newNode(t, srv.URL(), "node-a", natstransport.Config{}, bus.Config{Middleware: mws()}, reg),
		newNode(t, srv.URL(), "node-b", natstransport.Config{}, bus.Config{Middleware: mws()}, reg),
	}

	const emails, copies = 20, 10
	type outcome struct {
		email string
		id    string
		err   error
	}
	out := make([]outcome, emails*copies)
	var wg sync.WaitGroup
	for i := range out {
		email := fmt.Sprintf("user%02d@example.org", i%emails)
		if i%3 == 1 {
			email = " USER" + email[4:] // another spelling of the same address
		}
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			id, err := bus.Dispatch[string](ctx, nodes[i%2].bus, &commands.CreateStaff{
				StaffID: fmt.Sprintf("s-%03d", i), Email: email, Name: "Someone",
			})
			out[i] = outcome{uniqueness.NormalizeEmail(email), id, err}
		})
	}
	wg.Wait()
	created := map[string]string{}
	for _, o := range out {
		if o.err == nil {
			require.NotContains(t, created, o.email, "two members for %s", o.email)
			created[o.email] = o.id
			continue
		}
		require.ErrorIs(t, o.err, middleware.ErrAlreadyTaken, "%s", o.email)
	}
	require.Len(t, created, emails)
	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, created, staff)
	require.Zero(t, backstops.Load(), "the backstop never fired")
}
