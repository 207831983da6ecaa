package lockstore

import "context"

// LaterReleaser is implemented by locks whose store can carry the unlock in
// a round trip it makes anyway (the PostgreSQL store's next batch), so that
// a holder that does not need to wait for the answer does not pay a round
// trip of its own. ReleaseLater has the contract of the package function
// ReleaseLater.
type LaterReleaser interface {
	ReleaseLater(done func(error))
}

// ReleaseLater gives l up as Release does, without waiting for the store to
// confirm it, when l is a LaterReleaser; otherwise it calls l.Release(ctx)
// and then done. Either way done is called exactly once, with what Release
// would have returned: nil when the lock was held up to the release, an
// error matching ErrLockLost when it was not or that could not be
// confirmed.
//
// A store calls done in its own goroutine, outside its mutex, as it calls
// an AfterLost function: done must be quick and not block.
//
// Until done is called the key may still be held for l: another claimant,
// on this node or another, gets it only once the release is applied, as
// after Release returns. A later Release of l returns nil at once, without
// waiting for that.
func ReleaseLater(ctx context.Context, l Lock, done func(error)) {
	if lr, ok := l.(LaterReleaser); ok {
		lr.ReleaseLater(done)
		return
	}
	done(l.Release(ctx))
}
