package postgres

import (
	"time"
)

// The lazy unlocks of ReleaseLater: an unlock nobody on this node waits for
// waits a moment for an eager request to share its round trip (see flush).

// lazyUnlockDelay is how long an unlock of ReleaseLater waits for a lock
// request to carry it (see flush): long enough for the next claim of a
// sender that gets its answer and sends again at once, short against the
// 1ms and longer polls of another node waiting for the key.
const lazyUnlockDelay = time.Millisecond

// companyWaitLocked is how long the first n pending requests wait before
// they go: when they are only lazy unlocks, and fewer than MaxBatch, they
// wait for a request that needs its answer, up to lazyUnlockDelay after
// the first of them, and no later than the connection's next ping would be
// (the owner does not watch the connection meanwhile). At most 0: they go
// now. c.mu is held.
func (c *lockConn) companyWaitLocked(n int) time.Duration {
	if c.eager > 0 || n >= c.s.cfg.MaxBatch {
		return 0
	}
	return min(c.s.lazyDelay-time.Since(c.pending[0].queued), time.Until(c.confirmed.Add(c.s.cfg.KeepAlive)))
}

// waitCompany waits up to wait for an eager request (submit wakes the
// owner when the first one comes). It returns false when the store closes.
func (c *lockConn) waitCompany(wait time.Duration) bool {
	if c.company == nil {
		c.company = time.NewTimer(wait)
	} else {
		c.company.Reset(wait)
	}
	select {
	case <-c.wake:
		c.company.Stop()
		return true
	case <-c.company.C:
		return true
	case <-c.s.ctx.Done():
		c.company.Stop()
		return false
	}
}
