package storm

import (
	"fmt"
	"math"
	"slices"
	"time"
)

// Latency sums up the latencies of the answered requests.
type Latency struct {
	P50, P90, P99, Max time.Duration
}

// latencyOf sums up ds, which it sorts.
func latencyOf(ds []time.Duration) Latency {
	slices.Sort(ds)
	return Latency{P50: percentile(ds, 50), P90: percentile(ds, 90), P99: percentile(ds, 99), Max: percentile(ds, 100)}
}

// percentile returns the p-th percentile (0 < p <= 100) of sorted, by
// nearest rank: the smallest value that at least p% of the values are at
// or below. It is 0 for no values.
func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	rank := int(math.Ceil(p * float64(len(sorted)) / 100))
	return sorted[min(max(rank, 1), len(sorted))-1]
}

// ms prints d in milliseconds, to a tenth.
func ms(d time.Duration) string {
	return fmt.Sprintf("%.1fms", float64(d)/float64(time.Millisecond))
}
