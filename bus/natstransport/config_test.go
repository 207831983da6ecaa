package natstransport_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/claimbus/claimbus/bus"
	"github.com/claimbus/claimbus/bus/natstransport"
	"github.com/claimbus/claimbus/internal/natstest"
)

// A bad configuration fails at construction: a stream that exists with
// other settings fails New, a consumer that exists with other settings
// fails Subscribe (and so bus.Start), and more replicas than the server
// has fail New.
func TestConfigMismatchFails(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	ctx := context.Background()
	tr, err := natstransport.New(ctx, srv.URL(), natstransport.Config{NodeID: "a", Stream: "S", SubjectPrefix: "p"})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, tr.Close()) })

	_, err = natstransport.New(ctx, srv.URL(), natstransport.Config{NodeID: "b", Stream: "S", SubjectPrefix: "q"})
	require.ErrorIs(t, err, natstransport.ErrConfigMismatch)
	require.ErrorContains(t, err, "subjects [p.>] (want [q.>])")
	_, err = natstransport.New(ctx, srv.URL(), natstransport.Config{NodeID: "b", Stream: "S", SubjectPrefix: "p", MemoryStorage: true})
	require.ErrorIs(t, err, natstransport.ErrConfigMismatch)
	require.ErrorContains(t, err, "storage")
	_, err = natstransport.New(ctx, srv.URL(), natstransport.Config{NodeID: "b", Stream: "R", SubjectPrefix: "r", Replicas: 3})
	require.ErrorContains(t, err, "create stream R")
	_, err = natstransport.New(ctx, srv.URL(), natstransport.Config{NodeID: "b", Stream: "T", SubjectPrefix: "p.sub"})
	require.Error(t, err, "subjects that overlap another stream's")

	sub, cancel := context.WithCancel(ctx)
	defer cancel()
	_, err = tr.BusConfig(bus.Config{}).Subscriber.Subscribe(sub, "command.x")
	require.NoError(t, err)
	other, err := natstransport.New(ctx, srv.URL(), natstransport.Config{NodeID: "b", Stream: "S", SubjectPrefix: "p", AckWait: time.Minute})
	require.NoError(t, err, "the stream agrees")
	t.Cleanup(func() { require.NoError(t, other.Close()) })
	_, err = other.BusConfig(bus.Config{}).Subscriber.Subscribe(sub, "command.x")
	require.ErrorIs(t, err, natstransport.ErrConfigMismatch)
	require.ErrorContains(t, err, "ack wait 5s (want 1m0s)")

	b, err := bus.New(other.BusConfig(bus.Config{}))
	require.NoError(t, err)
	require.NoError(t, bus.Handle(b, func(context.Context, *Echo) (string, error) { return "", nil }))
	// The reply consumer is new; the command consumer was created by a
	// node with the default AckWait.
	_, err = tr.BusConfig(bus.Config{}).Subscriber.Subscribe(sub, "command.natstransport_test.Echo")
	require.NoError(t, err)
	require.ErrorIs(t, b.Start(ctx), natstransport.ErrConfigMismatch)
	require.NoError(t, b.Close())
}
