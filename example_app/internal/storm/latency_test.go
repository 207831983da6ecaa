package storm

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestPercentile(t *testing.T) {
	t.Parallel()
	msOf := func(ns ...int) []time.Duration {
		out := make([]time.Duration, len(ns))
		for i, n := range ns {
			out[i] = time.Duration(n) * time.Millisecond
		}
		return out
	}
	hundred := make([]int, 100)
	for i := range hundred {
		hundred[i] = i + 1
	}
	tests := []struct {
		name   string
		values []time.Duration
		p      float64
		want   time.Duration
	}{
		{"none", nil, 50, 0},
		{"one p50", msOf(7), 50, 7 * time.Millisecond},
		{"one p99", msOf(7), 99, 7 * time.Millisecond},
		{"two p50 is the lower", msOf(1, 2), 50, 1 * time.Millisecond},
		{"two p51 is the upper", msOf(1, 2), 51, 2 * time.Millisecond},
		{"1..100 p50", msOf(hundred...), 50, 50 * time.Millisecond},
		{"1..100 p90", msOf(hundred...), 90, 90 * time.Millisecond},
		{"1..100 p99", msOf(hundred...), 99, 99 * time.Millisecond},
		{"1..100 max", msOf(hundred...), 100, 100 * time.Millisecond},
		{"1..10 p90", msOf(1, 2, 3, 4, 5, 6, 7, 8, 9, 10), 90, 9 * time.Millisecond},
		{"1..10 p99 rounds up to the last", msOf(1, 2, 3, 4, 5, 6, 7, 8, 9, 10), 99, 10 * time.Millisecond},
		{"seven p50", msOf(1, 2, 3, 4, 5, 6, 7), 50, 4 * time.Millisecond},
		{"seven p90", msOf(1, 2, 3, 4, 5, 6, 7), 90, 7 * time.Millisecond},
	}
	for _, tt := range tests {
		require.Equal(t, tt.want, percentile(tt.values, tt.p), tt.name)
	}

	// latencyOf sorts what it is given.
	l := latencyOf(msOf(30, 10, 20, 50, 40))
	require.Equal(t, Latency{P50: 30 * time.Millisecond, P90: 50 * time.Millisecond, P99: 50 * time.Millisecond, Max: 50 * time.Millisecond}, l)
	require.Equal(t, Latency{}, latencyOf(nil))
	require.Equal(t, "12.3ms", ms(12345*time.Microsecond))
}
