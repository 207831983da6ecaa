package postgres

import (
	"context"
	"sync"
	"sync/atomic"

	"github.com/claimbus/claimbus/lockstore"
)

// queueShards spreads the node-local queue over independent mutexes, so
// that claimants of distinct keys rarely meet on one.
const queueShards = 64

// turnQueue is the node-local, per-lock-id FIFO queue in front of the
// server: at most one claimant of a lock id holds its turn at a time, and
// only the turn holder talks to the server about that lock id. A session
// that already holds an advisory lock is granted it again, so without this
// queue two local claimants sharing a lock connection would both get in.
//
// The turn is held from the moment a claimant is let in until its lock ends
// (released, lost) or its attempt fails; whoever ends it calls pass, exactly
// once, which hands the turn straight to the first waiter.
type turnQueue struct {
	shards [queueShards]queueShard
	// waiters counts the claimants waiting in take now.
	waiters atomic.Int64
}

type queueShard struct {
	mu sync.Mutex
	// m holds a lock id while its turn is taken; the value is nil until a
	// second claimant queues behind the holder.
	m map[LockID]*turnWaiters
}

// turnWaiters are the claimants waiting for one lock id's turn, first come
// first served.
type turnWaiters struct {
	list []chan struct{}
}

func newTurnQueue() *turnQueue {
	q := &turnQueue{}
	for i := range q.shards {
		q.shards[i].m = make(map[LockID]*turnWaiters)
	}
	return q
}

func (q *turnQueue) shard(id LockID) *queueShard {
	return &q.shards[mixLockID(id)%queueShards]
}

// tryTake takes id's turn if no one holds it.
func (q *turnQueue) tryTake(id LockID) bool {
	sh := q.shard(id)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if _, busy := sh.m[id]; busy {
		return false
	}
	sh.m[id] = nil
	return true
}

// take waits for id's turn, first come first served, until ctx ends (ctx's
// error) or closing is closed (lockstore.ErrClosed). On error the caller
// does not hold the turn and has left no trace in the queue.
func (q *turnQueue) take(ctx context.Context, closing <-chan struct{}, id LockID) error {
	sh := q.shard(id)
	sh.mu.Lock()
	w, busy := sh.m[id]
	if !busy {
		sh.m[id] = nil
		sh.mu.Unlock()
		return nil
	}
	if w == nil {
		w = &turnWaiters{}
		sh.m[id] = w
	}
	ready := make(chan struct{})
	w.list = append(w.list, ready)
	sh.mu.Unlock()
	q.waiters.Add(1)
	defer q.waiters.Add(-1)

	var err error
	select {
	case <-ready:
		return nil
	case <-ctx.Done():
		err = ctx.Err()
	case <-closing:
		err = lockstore.ErrClosed
	}
	sh.mu.Lock()
	select {
	case <-ready:
		// Handed the turn while giving up: hand it on.
		sh.mu.Unlock()
		q.pass(id)
		return err
	default:
	}
	if w := sh.m[id]; w != nil {
		for i, c := range w.list {
			if c == ready {
				w.list = append(w.list[:i], w.list[i+1:]...)
				break
			}
		}
	}
	sh.mu.Unlock()
	return err
}

// pass ends the current turn of id: the first waiter, if any, takes it.
func (q *turnQueue) pass(id LockID) {
	sh := q.shard(id)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	w := sh.m[id]
	if w == nil || len(w.list) == 0 {
		delete(sh.m, id)
		return
	}
	next := w.list[0]
	w.list[0] = nil
	w.list = w.list[1:]
	close(next)
}

// waiting returns how many claimants wait for id's turn (its holder not
// counted).
func (q *turnQueue) waiting(id LockID) int {
	sh := q.shard(id)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if w := sh.m[id]; w != nil {
		return len(w.list)
	}
	return 0
}

// mixLockID spreads lock ids evenly (over queue shards and lock
// connections).
func mixLockID(id LockID) uint64 {
	h := uint64(uint32(id.Namespace))<<32 | uint64(uint32(id.ID))
	h ^= h >> 33
	h *= 0xff51afd7ed558ccd
	h ^= h >> 33
	return h
}
