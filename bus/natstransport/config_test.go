package natstransport_test

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/claimbus/claimbus/bus"
	"github.com/claimbus/claimbus/bus/natstransport"
	"github.com/claimbus/claimbus/internal/natstest"
)

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	// Each configuration, with the problems its error names (none: valid).
	tests := map[string]struct {
		cfg  natstransport.Config
		want []string
	}{
		"valid": {natstransport.Config{NodeID: "node 1/é"}, nil},
		"valid, every field": {natstransport.Config{
			NodeID: "n", Stream: "S-1_x", SubjectPrefix: "app.claimbus-1", DurablePrefix: "d_1",
			AckWait: time.Second, MaxAckPending: 10, RequestTimeout: time.Second, ReconnectWait: time.Second,
			Replicas: 3, MemoryStorage: true, NatsOptions: []nats.Option{nats.Name("x")},
		}, nil},
		"every problem": {natstransport.Config{
			Stream: "a.b", SubjectPrefix: "a..b", DurablePrefix: "a b",
			AckWait: -1, RequestTimeout: -1, ReconnectWait: -1, MaxAckPending: -1, Replicas: 6,
			NatsOptions: []nats.Option{nil},
		}, []string{"NodeID is required", "Stream", "SubjectPrefix", "DurablePrefix", "AckWait is negative",
			"RequestTimeout is negative", "ReconnectWait is negative", "MaxAckPending is negative", "Replicas 6",
			"NatsOptions[0] is nil"}},
		"ack wait too short": {natstransport.Config{NodeID: "n", AckWait: time.Microsecond}, []string{"below a millisecond"}},
		"wildcard prefix":    {natstransport.Config{NodeID: "n", SubjectPrefix: "a.>"}, []string{"SubjectPrefix"}},
		"reserved prefix":    {natstransport.Config{NodeID: "n", SubjectPrefix: "$JS"}, []string{"SubjectPrefix"}},
		"negative replicas":  {natstransport.Config{NodeID: "n", Replicas: -1}, []string{"Replicas -1"}},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			err := tt.cfg.Validate()
			require.Equal(t, tt.want == nil, err == nil, "Validate() = %v", err)
			for _, w := range tt.want {
				require.ErrorContains(t, err, w)
			}
		})
	}
	_, err := natstransport.New(context.Background(), "", natstransport.Config{NodeID: "x"})
	require.ErrorContains(t, err, "no NATS URL")
	_, err = natstransport.New(context.Background(), "nats://127.0.0.1:1", natstransport.Config{})
	require.ErrorContains(t, err, "NodeID is required", "the configuration is checked before connecting")
}

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
	_, err = tr.Subscriber().Subscribe(sub, "command.x")
	require.NoError(t, err)
	other, err := natstransport.New(ctx, srv.URL(), natstransport.Config{NodeID: "b", Stream: "S", SubjectPrefix: "p", AckWait: time.Minute})
	require.NoError(t, err, "the stream agrees")
	t.Cleanup(func() { require.NoError(t, other.Close()) })
	_, err = other.Subscriber().Subscribe(sub, "command.x")
	require.ErrorIs(t, err, natstransport.ErrConfigMismatch)
	require.ErrorContains(t, err, "ack wait 5s (want 1m0s)")

	b, err := bus.New(other.BusConfig(bus.Config{}))
	require.NoError(t, err)
	require.NoError(t, bus.Handle(b, func(context.Context, *Echo) (string, error) { return "", nil }))
	// The reply consumer is new; the command consumer was created by a
	// node with the default AckWait.
	_, err = tr.Subscriber().Subscribe(sub, "command.natstransport_test.Echo")
	require.NoError(t, err)
	require.ErrorIs(t, b.Start(ctx), natstransport.ErrConfigMismatch)
	require.NoError(t, b.Close())
}
