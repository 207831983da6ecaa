package postgres

import (
	"time"

	"github.com/cenkalti/backoff/v5"
)

// jitterFactor spreads each wait of a backoff over [1-f, 1+f] of its
// nominal length (capped at the backoff's maximum), so that nodes that lost
// their connections at the same instant (a failover, a restart) do not
// reconnect, or poll a freed key, in step.
const jitterFactor = 0.5

// newBackoff returns a doubling backoff from first to at most most, with
// jitter.
func newBackoff(first, most time.Duration) *backoff.ExponentialBackOff {
	b := &backoff.ExponentialBackOff{
		InitialInterval:     min(first, most),
		RandomizationFactor: jitterFactor,
		Multiplier:          2,
		MaxInterval:         most,
	}
	b.Reset()
	return b
}

// nextWait is b's next wait, never above most.
func nextWait(b *backoff.ExponentialBackOff, most time.Duration) time.Duration {
	return min(b.NextBackOff(), most)
}
