package sqltransport

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		cfg  Config
		want []string
	}{
		{"valid", Config{NodeID: "node-1.eu:a_b"}, nil},
		{"every problem", Config{
			PollInterval: -1, ReplyPollInterval: -1, AckDeadline: -1, RetryInterval: -1,
			TablePrefix: "bad-prefix",
		}, []string{"NodeID is required", "PollInterval is negative", "ReplyPollInterval is negative",
			"AckDeadline is negative", "RetryInterval is negative", "TablePrefix"}},
		{"bad node id", Config{NodeID: "a$b c"}, []string{"invalid topic"}},
		{"ack deadline too short", Config{NodeID: "x", AckDeadline: 29 * time.Millisecond}, []string{"AckDeadline 29ms is shorter than 30ms"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.cfg.validate()
			if tt.want == nil {
				require.NoError(t, err)
				return
			}
			for _, w := range tt.want {
				require.ErrorContains(t, err, w)
			}
		})
	}
	_, err := New(context.Background(), nil, Config{NodeID: "x"})
	require.Error(t, err)
}
