// Package lockstore hands out exclusive locks on keys, the primitive under
// every claimbus guarantee.
//
// A Key is a namespace and an id. A Locker grants a Lock on a key to one
// owner at a time: TryLock fails at once with ErrLocked while the key is
// held, Lock waits first come first served until the key is free or its
// context ends. A Store is a Locker that can also list what it holds (Held)
// and be closed.
//
// A lock ends when its holder releases it, when its lease runs out, or
// when the connection holding it closes; the store then reports the loss
// (AfterLost, ErrLockLost) and grants the key with a greater fencing token
// (Lock.Token), so a resource can refuse a stale holder. Several keys are
// taken in the store's order, so two commands never deadlock. The backends
// are the memory store here, lockstore/postgres for every node on one
// database and lockstore/sqlite for one host; the SQL backends also run
// critical sections in transactions (TxLocker).
//
// docs/lockstore.md describes owner liveness, the backends, several keys,
// transaction locks and fencing tokens.
package lockstore
