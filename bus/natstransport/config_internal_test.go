package natstransport

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"
)

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	// Each configuration, with the problems its error names (none: valid).
	tests := map[string]struct {
		cfg  Config
		want []string
	}{
		"valid": {Config{NodeID: "node 1/é"}, nil},
		"valid, every field": {Config{
			NodeID: "n", Stream: "S-1_x", SubjectPrefix: "app.claimbus-1", DurablePrefix: "d_1",
			AckWait: time.Second, MaxAckPending: 10, RequestTimeout: time.Second, ReconnectWait: time.Second,
			Replicas: 3, MemoryStorage: true, NatsOptions: []nats.Option{nats.Name("x")},
		}, nil},
		"every problem": {Config{
			Stream: "a.b", SubjectPrefix: "a..b", DurablePrefix: "a b",
			AckWait: -1, RequestTimeout: -1, ReconnectWait: -1, MaxAckPending: -1, Replicas: 6,
			NatsOptions: []nats.Option{nil},
		}, []string{"NodeID is required", "Stream", "SubjectPrefix", "DurablePrefix", "AckWait is negative",
			"RequestTimeout is negative", "ReconnectWait is negative", "MaxAckPending is negative", "Replicas 6",
			"NatsOptions[0] is nil"}},
		"ack wait too short": {Config{NodeID: "n", AckWait: time.Microsecond}, []string{"below a millisecond"}},
		"wildcard prefix":    {Config{NodeID: "n", SubjectPrefix: "a.>"}, []string{"SubjectPrefix"}},
		"reserved prefix":    {Config{NodeID: "n", SubjectPrefix: "$JS"}, []string{"SubjectPrefix"}},
		"negative replicas":  {Config{NodeID: "n", Replicas: -1}, []string{"Replicas -1"}},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			err := tt.cfg.validate()
			require.Equal(t, tt.want == nil, err == nil, "validate() = %v", err)
			for _, w := range tt.want {
				require.ErrorContains(t, err, w)
			}
		})
	}
	_, err := New(context.Background(), "", Config{NodeID: "x"})
	require.ErrorContains(t, err, "no NATS URL")
	_, err = New(context.Background(), "nats://127.0.0.1:1", Config{})
	require.ErrorContains(t, err, "NodeID is required", "the configuration is checked before connecting")
}
