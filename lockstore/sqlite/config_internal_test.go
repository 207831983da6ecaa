package sqlite

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/claimbus/claimbus/lockstore"
)

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		cfg  Config
		want []string
	}{
		{"zero", Config{}, nil},
		{"ttl and node", Config{Locks: lockstore.MemoryConfig{TTL: time.Second, Node: "n1", Shards: 8}}, nil},
		{"negative ttl", Config{Locks: lockstore.MemoryConfig{TTL: -1}}, []string{"TTL"}},
		{"absolute lock dir", Config{LockDir: "/run/lock"}, nil},
		{"relative lock dir", Config{LockDir: "locks"}, []string{`LockDir "locks" is not an absolute path`}},
		{"every problem", Config{Locks: lockstore.MemoryConfig{TTL: -1, Shards: 3}, LockDir: "./locks"}, []string{"TTL", "Shards", "LockDir"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.cfg.validate()
			if tt.want == nil {
				require.NoError(t, err)
				return
			}
			require.Error(t, err)
			for _, w := range tt.want {
				require.ErrorContains(t, err, w)
			}
		})
	}
}
