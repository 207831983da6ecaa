// Package lockstoretest is the conformance suite every lockstore backend
// passes, the fake clock that drives leases in tests, and WaitTakeable for
// tests on a store whose release ends after its caller moved on.
//
// A backend's test calls Run with a function that returns a fresh store:
//
//	func TestConformance(t *testing.T) {
//		lockstoretest.Run(t, func(t *testing.T) lockstore.Store {
//			store, err := lockstore.NewMemory(lockstore.MemoryConfig{})
//			require.NoError(t, err)
//			return store
//		})
//	}
//
// A backend whose locks are leases also calls RunLeases, giving the suite a
// hand on the store's clock (for the memory store, a Clock from this
// package). Connection loss is backend-specific and tested by the backend.
//
// A SQL backend (a lockstore.TxLocker) also calls RunTx, with a function
// that returns a TxStore: the store, a peer store on the same database,
// and the suite's hands on that database (marker rows written and read
// back, a transaction of the caller's own, a way to end a held lock):
//
//	func TestTxLockerConformance(t *testing.T) {
//		lockstoretest.RunTx(t, func(t *testing.T) lockstoretest.TxStore[*sql.Tx, sqlite.Querier] {
//			s := newStore(t)
//			return lockstoretest.TxStore[*sql.Tx, sqlite.Querier]{Locker: s, Peer: s, Close: s.Close /* ... */}
//		})
//	}
//
// Every subtest runs in parallel on its own store with fresh keys, and waits
// on signals (channels, or the store's WaitCounter polled with a deadline of
// Timeout), never on sleeps. The store must implement WaitCounter, so that
// waiters can be queued in a known order.
//
// This package is test support: its API follows the suite's needs and is
// not covered by the stability promise of lockstore.
package lockstoretest
