package lockstore

import "errors"

var (
	// ErrLocked is returned by TryLock while a live owner holds the key.
	ErrLocked = errors.New("lockstore: locked")
	// ErrClosed is returned by a store that is closed, and to the waiters a
	// Close interrupts.
	ErrClosed = errors.New("lockstore: store closed")
	// ErrInvalidKey is returned for a key with an empty or oversized
	// namespace or id (see Key.Validate).
	ErrInvalidKey = errors.New("lockstore: invalid key")
	// ErrUnavailable is returned while a store cannot reach its backend (for
	// PostgreSQL: while no lock connection is up, or a key's lock was lost
	// with a connection that is being replaced).
	ErrUnavailable = errors.New("lockstore: unavailable")
	// ErrTimeout is returned when a wait for a lock ran out on the server's
	// side (for PostgreSQL: lock_timeout).
	ErrTimeout = errors.New("lockstore: lock wait timed out")
	// ErrLockLost is returned by Refresh on a lock that has already ended,
	// and by Release when it cannot confirm that the lock was held up to
	// the release: the lock was lost before (lease expiry, a lost
	// connection, Reset, Close) or the unlock went unconfirmed. The
	// holder's writes under the lock may then have overlapped another
	// owner's (see Lock.Token for fencing).
	ErrLockLost = errors.New("lockstore: lock lost")
	// ErrCapacity is returned by TryLock and Lock when the store, or the
	// server behind it, has no room for one more lock (for PostgreSQL:
	// Config.MaxHeld, or the server's lock table, sized by
	// max_locks_per_transaction). Only that request fails: every lock
	// held stays held.
	ErrCapacity = errors.New("lockstore: no capacity for another lock")
)
