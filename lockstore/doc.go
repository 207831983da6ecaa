// Package lockstore hands out exclusive locks on keys, the primitive under
// every claimbus guarantee.
//
// A Key is a namespace and an id. A Locker grants a Lock on a key to one
// owner at a time: TryLock fails at once with ErrLocked while the key is
// held, Lock waits first come first served until the key is free or its
// context ends. A Store is a Locker that can also list what it holds (Held)
// and be closed.
//
// # Owner liveness
//
// A goroutine has no identity a store could watch, and a cancelled context
// does not stop a goroutine that is still writing, so ownership is explicit.
// A lock ends when its holder calls Release; when its lease runs out (the
// memory store with a TTL, see Refresher); or when the connection holding it
// closes (PostgreSQL). In every case but Release, the lock's Lost channel
// closes, the holder's Release returns an error matching ErrLockLost, and
// the next waiter is granted the key with a greater fencing token
// (Lock.Token), so a resource can refuse writes from a stale holder.
// Release returns nil only for a lock held up to its release.
//
// A caller who wants a lock to die with an owner context binds the two in
// one line:
//
//	l, err := store.Lock(ctx, key)
//	if err != nil {
//		return err
//	}
//	stop := context.AfterFunc(ownerCtx, func() { _ = l.Release(context.Background()) })
//	defer func() {
//		stop()
//		_ = l.Release(context.Background())
//	}()
//
// The other way round, AfterLost calls a function when a lock is lost,
// where the store ends it, with no goroutine or polling per lock (the
// locks of every store here implement LostNotifier); a holder cancels its
// work with it:
//
//	ctx, cancel := context.WithCancelCause(ctx)
//	stop := lockstore.AfterLost(l, func() { cancel(lockstore.ErrLockLost) })
//	defer stop()
//
// Two capabilities save round trips where a store makes them anyway.
// ReleaseLater gives a lock up without waiting for the store's answer
// (its done is told the result), which the PostgreSQL store carries in its
// next round trip; a store without it (LaterReleaser) releases at once. A
// Prober (the PostgreSQL store) answers a Probe, a lookup as SQL, in the
// round trip that takes the key.
//
// # Backends
//
// The memory store (NewMemory) is in process. The PostgreSQL store
// (package lockstore/postgres) coordinates every node sharing one database
// with advisory locks; the SQLite store (package lockstore/sqlite) is the
// embedded single-node one. Every backend passes the conformance suite in
// package lockstoretest. Importing lockstore alone compiles neither pgx nor
// SQLite.
//
// # Several keys
//
// A caller taking several keys takes them in the order SortKeys gives
// (the store's KeyOrder when it has one), so that two callers can never
// deadlock on each other.
//
// # Transaction locks
//
// The SQL backends also lock inside database transactions: TxLocker is
// that contract (Serialize, Exclusive, WithTx), stated once on the
// interface and implemented by lockstore/postgres and lockstore/sqlite,
// whose generic free functions Serialize and Exclusive do the same and
// return a value of fn's too. In short: one fn at a time per key, with a
// rising fencing token; Serialize commits when fn returns nil and rolls
// back on an error, a panic, a done ctx or a lock the store ended
// (ErrLockLost); calls nest in savepoints of the open transaction (the
// same key reuses its token); WithTx attaches a caller's own transaction.
// lockstoretest.RunTx is its conformance suite, which both backends pass
// and which a new SQL backend runs too; what differs between them (how the
// lock is taken, what ends it, timeouts) is in each backend's package
// documentation.
//
// # Effects after commit
//
// AfterCommit registers a function to run once the outermost transaction
// opened by a backend's Serialize has committed and released its lock, in
// the order registered; it is dropped on rollback, and runs at once
// outside any transaction. A nested Serialize runs in a savepoint: when
// its fn fails, its writes and the functions registered inside it are
// dropped, whatever the enclosing fn does next (NewEffects and NestEffects
// are the backends' side of this).
//
// # Fencing tokens in critical sections
//
// The fn of a backend's Serialize or Exclusive runs with a ctx that carries
// the fencing token of the lock it runs under (TokenFrom), like
// Lock.Token for a Locker grant.
package lockstore
