package uniqueness

import (
	"context"
	"fmt"

	"github.com/claimbus/claimbus/internal/afterlost"
	"github.com/claimbus/claimbus/lockstore"
)

// A claimer learns that a watched claim's lock was lost from the lock's
// store, at once (see lockstore.AfterLost): watchLost registers the claim
// with its lock and its release stops the registration, with no goroutine
// or timer of the claimer's own. A claim whose lock is lost before the
// next claimant of this process is granted the key is reported at that
// grant at the latest.

// watchLost arranges for f to be called, once, with an error matching
// lockstore.ErrLockLost and naming the key, if cl's lock is lost before cl is
// released. One function per claim: a later call replaces it. It must not
// run at the same time as cl's Release (the middleware calls it before it
// hands its claims on).
func (c *claimer) watchLost(cl *hold, f context.CancelCauseFunc) {
	cl.sh.mu.Lock()
	if cl.st == nil {
		cl.sh.mu.Unlock()
		return
	}
	if cl.lostSeen {
		cl.sh.mu.Unlock()
		f(cl.lostError())
		return
	}
	cl.onLost = f
	first := !cl.watched
	cl.watched = true
	cl.sh.mu.Unlock()
	if first {
		// Outside sh.mu: a store may tell the claim of a loss at once.
		afterlost.Watch(cl.lock, &cl.lostWatch, (*lostTarget)(cl))
	}
}

// lostTarget is a Claim as the afterlost.Target its lock's store tells of
// the loss: a type of its own, so that LockLost is not a method of Claim
// that a handler holding the claim could call.
type lostTarget hold

// LockLost reports the loss of the claim's lock to its function, if any;
// the lock's store calls it (see watchLost).
func (t *lostTarget) LockLost() {
	cl := (*hold)(t)
	cl.sh.mu.Lock()
	if cl.st == nil {
		// Released meanwhile: nothing to report.
		cl.sh.mu.Unlock()
		return
	}
	report := cl.takeLost()
	cl.sh.mu.Unlock()
	if report != nil {
		report()
	}
}

// takeLost marks the claim's lock as lost and returns the call that
// reports it (nil when no function is registered). cl.sh.mu is held.
func (cl *hold) takeLost() func() {
	cl.lostSeen = true
	f := cl.onLost
	if f == nil {
		return nil
	}
	cl.onLost = nil
	return func() { f(cl.lostError()) }
}

// lostError is the cause given to the function of a lost claim.
func (cl *hold) lostError() error {
	return fmt.Errorf("uniqueness: claim lost while the handler ran: %s: %w", cl.key, lockstore.ErrLockLost)
}

// unwatch forgets the claim's function and stops its registration, if
// any. cl.sh.mu is held.
func (cl *hold) unwatch() {
	cl.onLost = nil
	if cl.watched {
		cl.lostWatch.Stop()
	}
}
