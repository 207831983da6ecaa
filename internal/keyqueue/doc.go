// Package keyqueue is the per-key FIFO queue of the lock stores and the
// claims of uniqueness: who holds each key, who waits for it in what order, and the
// handover from a holder to its first waiter, in memory that an idle key
// gives back.
//
// It has three parts, so that each user keeps its own mutex where that
// mutex guards more than the queue:
//   - Table, a map from a key to its entry that frees an idle key's
//     memory: an open-addressing hash table that grows at three quarters
//     full and shrinks at an eighth, without tombstones. The memory store
//     keeps its held locks in one per shard, the claims of uniqueness its per-key state.
//   - List, the FIFO of one key's waiters, doubly linked so that a waiter
//     that gives up leaves in constant time. The memory store queues its
//     Lock calls on one.
//   - Queue, both under a mutex per shard: a key's turn is taken (TryTake,
//     Take) and handed straight to its first waiter (Pass); a waiter whose
//     wait ends leaves no trace and is never granted. The PostgreSQL store
//     queues its node-local claimants on one.
//
// Table and List are not safe for concurrent use; Queue is.
package keyqueue
