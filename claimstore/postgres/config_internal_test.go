package postgres

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		cfg  Config
		want []string // every problem reported
	}{
		{"zero", Config{}, nil},
		{"set", Config{Schema: "app", MaxBatch: 10, BatchLanes: 4}, nil},
		{"bad schema", Config{Schema: "a\x00b"}, []string{"Config.Schema"}},
		{"long schema", Config{Schema: strings.Repeat("s", 64)}, []string{"Config.Schema"}},
		{"all bad", Config{MaxBatch: -1, BatchLanes: maxBatchLanes + 1},
			[]string{"Config.MaxBatch is -1", "Config.BatchLanes is 65"}},
		{"batch too big", Config{MaxBatch: maxBatchLimit + 1}, []string{"Config.MaxBatch"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			err := tc.cfg.validate()
			if tc.want == nil {
				require.NoError(t, err)
				return
			}
			require.Error(t, err)
			for _, w := range tc.want {
				require.Contains(t, err.Error(), w)
			}
		})
	}
}
