package claimcheck

import (
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestMicrosRoundsUp(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		d    time.Duration
		want int64
	}{
		{0, 0},
		{time.Nanosecond, 1},
		{time.Microsecond, 1},
		{time.Microsecond + 1, 2},
		{time.Hour, 3_600_000_000},
		{math.MaxInt64, math.MaxInt64/1000 + 1},
	} {
		require.Equal(t, tc.want, Micros(tc.d), "%d", int64(tc.d))
	}
}
