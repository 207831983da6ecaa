package postgres

import (
	"context"

	"github.com/claimbus/claimbus/internal/keyqueue"
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
// once, which hands the turn straight to the first waiter. A lock id takes
// memory only while its turn is held (see keyqueue.Queue).
type turnQueue struct {
	q *keyqueue.Queue[LockID]
}

func newTurnQueue() *turnQueue {
	return &turnQueue{q: keyqueue.NewQueue(queueShards, mixLockID)}
}

// tryTake takes id's turn if no one holds it.
func (q *turnQueue) tryTake(id LockID) bool { return q.q.TryTake(id) }

// take waits for id's turn, first come first served, until ctx ends (ctx's
// error) or closing is closed (lockstore.ErrClosed). On error the caller
// does not hold the turn and has left no trace in the queue.
func (q *turnQueue) take(ctx context.Context, closing <-chan struct{}, id LockID) error {
	return q.q.Take(ctx, closing, lockstore.ErrClosed, id)
}

// pass ends the current turn of id: the first waiter, if any, takes it.
func (q *turnQueue) pass(id LockID) { q.q.Pass(id) }

// waiting returns how many claimants wait for id's turn (its holder not
// counted).
func (q *turnQueue) waiting(id LockID) int { return q.q.Waiting(id) }

// queued returns how many claimants hold or wait for id's turn: its
// waiters, plus one while the turn is held, read at one moment.
func (q *turnQueue) queued(id LockID) int { return q.q.Queued(id) }

// waiters returns how many claimants wait for a turn now, on every id.
func (q *turnQueue) waiters() int64 { return q.q.Waiters() }

// mixLockID spreads lock ids evenly (over queue shards and lock
// connections).
func mixLockID(id LockID) uint64 {
	h := uint64(uint32(id.Namespace))<<32 | uint64(uint32(id.ID))
	h ^= h >> 33
	h *= 0xff51afd7ed558ccd
	h ^= h >> 33
	return h
}
