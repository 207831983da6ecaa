package lockstore

import (
	"context"
	"time"
)

// Locker hands out exclusive locks on keys.
//
// The ctx given to TryLock and Lock bounds the call (the wait), never the
// ownership: a granted Lock stays held until its Release, or until the store
// ends it (lease expiry, a lost connection, Reset, Close), which closes Lost
// and makes its Release return an error matching ErrLockLost.
type Locker interface {
	// TryLock takes key now, or fails with ErrLocked while a live owner holds
	// it. A ctx that is already done gets ctx's error.
	TryLock(ctx context.Context, key Key) (Lock, error)
	// Lock waits, first come first served within one process, until key is
	// free or ctx ends; then it returns ctx's error and leaves no trace: a
	// cancelled waiter is never granted.
	Lock(ctx context.Context, key Key) (Lock, error)
}

// Lock is one grant of a key to one owner.
type Lock interface {
	// Key is the key this lock holds.
	Key() Key
	// Token is the fencing token of this grant: strictly greater than every
	// earlier token for the same key, so a resource can refuse a stale holder.
	Token() int64
	// AcquiredAt is when the lock was granted.
	AcquiredAt() time.Time
	// Lost is closed when the lock ends for any reason other than its own
	// Release: lease expiry, a lost connection, Reset or Close. The holder
	// should stop writing under the lock; its Release reports the loss.
	Lost() <-chan struct{}
	// Release gives the key up and tells whether the lock was held to the
	// end. It returns nil only when the lock was still held up to the
	// release, and otherwise an error matching ErrLockLost: the lock was
	// lost before (lease expiry, a lost connection, Reset, Close), or the
	// unlock could not be confirmed. Either way this owner no longer holds
	// the key once Release returns.
	//
	// It is idempotent: after a Release that returned nil, later calls
	// return nil; on a lost lock, every call returns an error matching
	// ErrLockLost. It never frees a later owner's grant.
	Release(ctx context.Context) error
}

// Refresher is implemented by locks that are leases (a store configured with
// a TTL): Refresh extends the lease by one TTL from now. It fails with
// ErrLockLost when the lease has already ended.
type Refresher interface {
	Refresh(ctx context.Context) error
}

// Holder describes one lock held now.
type Holder struct {
	// Key is the key held. For locks held by other nodes a store may only
	// know part of it (see the backend's documentation).
	Key Key
	// Token is the fencing token of the grant, or 0 when unknown.
	Token int64
	// AcquiredAt is when the grant was made, or the zero time when unknown.
	AcquiredAt time.Time
	// Node names the process holding the lock.
	Node string
}

// Store is a Locker that can also list what it holds and be closed.
type Store interface {
	Locker
	// Held lists the locks held now.
	Held(ctx context.Context) ([]Holder, error)
	// Close ends every lock the store granted (closing their Lost channels;
	// their Release then reports ErrLockLost), fails every waiter with
	// ErrClosed and stops every goroutine it started.
	Close() error
}
