package idempotency

import (
	"github.com/claimbus/claimbus/lockstore"
	"github.com/claimbus/claimbus/middleware"
)

var (
	// ErrIdempotencyConflict matches the rejection a command gets when its
	// key's stored outcome is for a command with another payload. It is the
	// same value as middleware.ErrIdempotencyConflict, so errors.Is matches
	// it on the sender's side, over any transport.
	ErrIdempotencyConflict error = middleware.ErrIdempotencyConflict

	// ErrLockLost is the cause (context.Cause) of a handler's context
	// cancelled by the middleware because the lock on its idempotency key
	// was lost (a lease ran out, a lock connection broke): a repeat may now
	// run on another node, so the handler should stop before it writes.
	// It is the same value as lockstore.ErrLockLost, whose meaning it names
	// for the idempotency key.
	ErrLockLost = lockstore.ErrLockLost
)
