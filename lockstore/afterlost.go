package lockstore

import "github.com/claimbus/claimbus/internal/afterlost"

// AfterLost arranges for f to be called once l is lost: when its store ends
// it for any reason other than its own Release (lease expiry, a lost
// connection, Reset, Close), that is when Lost closes. It is shaped like
// context.AfterFunc:
//   - f runs at most once, and never for a lock released by its owner, nor
//     after a stop that returned true;
//   - stop stops f from running and reports whether it did: false when f
//     has run or started already, or stop was called before;
//   - on a lock lost already, f runs promptly, in a goroutine of its own.
//
// f never runs under a store's mutex, so it may call into the store (the
// lock's Release, say). A store calls it in the goroutine that ended the
// lock once its own locks are released: the memory store's Reset and Close
// call it before they return, and a lease's end in the timer's goroutine.
// So f must be quick and not block, as a context.CancelFunc is; to do more,
// f starts a goroutine. f must not call the store's Close, which waits for
// the calls of f it made and for lease timers, f's own included.
//
// The locks of every store of this module (the memory, PostgreSQL and
// SQLite stores) call f where their store ends them, with no goroutine or
// timer per lock; so does a lock of another package with a method
// AfterLost(f func()) (stop func() bool) of this contract. Any other lock
// is watched by one goroutine that waits for Lost until the loss or the first
// stop: call stop when done with the lock, as its Release does not end that
// goroutine. A lock whose Lost is nil is never lost: f never runs.
func AfterLost(l Lock, f func()) (stop func() bool) {
	n := &afterlost.Node{}
	afterlost.Watch(l, n, afterlost.Func(f))
	return n.Stop
}
