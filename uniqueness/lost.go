package uniqueness

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"
)

// DefaultLostCheckInterval is how often, while claims are watched, a
// Claimer checks whether their locks were lost, when
// Config.LostCheckInterval is zero.
const DefaultLostCheckInterval = 100 * time.Millisecond

// lostWatch reports the loss of a watched claim's lock before its release,
// without a goroutine per claim: a lost lock is found at once when the next
// claimant of this process is granted the key, and otherwise by a check of
// every watched claim each interval. The check is a timer (time.AfterFunc)
// that is armed only while claims are watched: no goroutine waits for it.
type lostWatch struct {
	interval time.Duration
	// watched counts the claims whose onLost is set.
	watched atomic.Int64
	// armed is set while a check is scheduled or running.
	armed atomic.Bool
}

// watchLost arranges for f to be called, once, with an error matching
// ErrClaimLost and naming the key, if cl's lock is lost before cl is
// released. One function per claim: a later call replaces it.
func (c *Claimer) watchLost(cl *Claim, f context.CancelCauseFunc) {
	cl.sh.mu.Lock()
	if cl.st == nil {
		cl.sh.mu.Unlock()
		return
	}
	if cl.onLost == nil {
		c.lost.watched.Add(1)
	}
	cl.onLost = f
	cl.sh.mu.Unlock()
	if c.lost.armed.CompareAndSwap(false, true) {
		time.AfterFunc(c.lost.interval, c.checkLost)
	}
}

// take removes cl's function from the watch and returns the call that
// reports the loss (nil when none). cl.sh.mu is held.
func (w *lostWatch) take(cl *Claim) func() {
	f := cl.onLost
	if f == nil {
		return nil
	}
	cl.onLost = nil
	w.watched.Add(-1)
	return func() { f(fmt.Errorf("%w: %s", ErrClaimLost, cl.key)) }
}

// forget removes cl's function from the watch. cl.sh.mu is held.
func (w *lostWatch) forget(cl *Claim) {
	if cl.onLost != nil {
		cl.onLost = nil
		w.watched.Add(-1)
	}
}

// checkLost reports every watched claim whose lock was lost, then checks
// again one interval later while claims are watched.
func (c *Claimer) checkLost() {
	var fire []func()
	for i := range c.shards {
		sh := &c.shards[i]
		sh.mu.Lock()
		for _, st := range sh.keys {
			if h := st.holder; h != nil && h.onLost != nil && isClosed(h.lock.Lost()) {
				fire = append(fire, c.lost.take(h))
			}
		}
		sh.mu.Unlock()
	}
	for _, f := range fire {
		f()
	}
	if c.lost.watched.Load() == 0 {
		c.lost.armed.Store(false)
		// A claim watched after the load above, and before armed was
		// cleared, found the check armed: keep checking for it.
		if c.lost.watched.Load() == 0 || !c.lost.armed.CompareAndSwap(false, true) {
			return
		}
	}
	time.AfterFunc(c.lost.interval, c.checkLost)
}

// isClosed reports whether ch is closed (or has a value ready).
func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}
