package keyqueue

import (
	"context"
	"sync"
	"sync/atomic"
)

// Queue hands out one turn per key, first come first served: at most one
// caller holds a key's turn at a time, from TryTake or Take until its Pass,
// which hands the turn straight to the key's first waiter. It is sharded by
// the key's hash, with a mutex per shard, so that callers on distinct keys
// rarely meet. A key takes memory only while its turn is held: an idle
// key's entry and its shard's slots are given back (see Table).
//
// It is safe for concurrent use.
type Queue[K comparable] struct {
	hash   func(K) uint64
	shards []queueShard[K]
	// free recycles the entries of keys, so that a take allocates none.
	free sync.Pool
	// waiters counts the callers waiting in Take now.
	waiters atomic.Int64
}

type queueShard[K comparable] struct {
	mu sync.Mutex
	// turns holds a key while its turn is taken, until its last Pass.
	turns Table[K, turn[K], *turn[K]]
	// Keep neighbouring shards' mutexes on different cache lines.
	_ [64]byte
}

// turn is the state of one key whose turn is taken: the callers waiting
// for it, first come first served.
type turn[K comparable] struct {
	key     K
	waiting List[turnWait]
}

// TableKey returns the turn's key.
func (t *turn[K]) TableKey() K { return t.key }

// turnWait is one Take waiting for a turn. ready gets one value when the
// turn is handed to it; granted, guarded by the shard's mutex, says so.
type turnWait struct {
	ready   chan struct{}
	granted bool
}

// waiterPool recycles the waiters of Take: a waiter leaves the pool with
// an empty ready channel and goes back to it with one.
var waiterPool = sync.Pool{New: func() any {
	return &Waiter[turnWait]{Value: turnWait{ready: make(chan struct{}, 1)}}
}}

// NewQueue returns an empty Queue of shards shards (a power of two) that
// spreads keys by hash.
func NewQueue[K comparable](shards int, hash func(K) uint64) *Queue[K] {
	if shards <= 0 || shards&(shards-1) != 0 {
		panic("keyqueue: NewQueue: shards must be a positive power of two")
	}
	return &Queue[K]{hash: hash, shards: make([]queueShard[K], shards)}
}

// newTurn returns an entry for key from the pool.
func (q *Queue[K]) newTurn(key K) *turn[K] {
	t, _ := q.free.Get().(*turn[K])
	if t == nil {
		t = new(turn[K])
	}
	t.key = key
	return t
}

// shard returns key's shard and hash.
func (q *Queue[K]) shard(key K) (*queueShard[K], uint64) {
	h := q.hash(key)
	// The low bits of h place the key in its shard's table; the high bits
	// pick the shard.
	return &q.shards[(h>>32)&uint64(len(q.shards)-1)], h
}

// TryTake takes key's turn if no one holds it, and reports whether it did.
func (q *Queue[K]) TryTake(key K) bool {
	sh, h := q.shard(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if sh.turns.Get(h, key) != nil {
		return false
	}
	sh.turns.Put(h, q.newTurn(key))
	return true
}

// Take waits for key's turn, first come first served, until ctx ends
// (ctx's error) or closing is closed (the error given as closed). On error
// the caller does not hold the turn and has left no trace: it was never
// granted the turn, or, granted it as it gave up, it passed it on.
func (q *Queue[K]) Take(ctx context.Context, closing <-chan struct{}, closed error, key K) error {
	sh, h := q.shard(key)
	sh.mu.Lock()
	t := sh.turns.Get(h, key)
	if t == nil {
		sh.turns.Put(h, q.newTurn(key))
		sh.mu.Unlock()
		return nil
	}
	w := waiterPool.Get().(*Waiter[turnWait])
	t.waiting.Push(w)
	sh.mu.Unlock()
	q.waiters.Add(1)
	defer q.waiters.Add(-1)

	var err error
	select {
	case <-w.Value.ready:
		// Pass, which set granted, let go of w before the send.
		w.Value.granted = false
		waiterPool.Put(w)
		return nil
	case <-ctx.Done():
		err = ctx.Err()
	case <-closing:
		err = closed
	}
	sh.mu.Lock()
	if w.Value.granted {
		// Handed the turn while giving up: hand it on.
		sh.mu.Unlock()
		<-w.Value.ready
		w.Value.granted = false
		waiterPool.Put(w)
		q.Pass(key)
		return err
	}
	// The key's turn is still taken (this waiter is queued on it), and its
	// entry is the one pushed to, since an entry goes only with its turn.
	sh.turns.Get(h, key).waiting.Remove(w)
	sh.mu.Unlock()
	waiterPool.Put(w)
	return err
}

// Pass ends the current turn of key: its first waiter, if any, takes it;
// otherwise the key is forgotten.
func (q *Queue[K]) Pass(key K) {
	sh, h := q.shard(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	t := sh.turns.Get(h, key)
	if t == nil {
		return
	}
	w := t.waiting.Pop()
	if w == nil {
		sh.turns.Delete(h, key)
		*t = turn[K]{}
		q.free.Put(t)
		return
	}
	w.Value.granted = true
	w.Value.ready <- struct{}{}
}

// Waiting returns how many callers wait for key's turn now, its holder not
// counted.
func (q *Queue[K]) Waiting(key K) int {
	sh, h := q.shard(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if t := sh.turns.Get(h, key); t != nil {
		return t.waiting.Len()
	}
	return 0
}

// Queued returns how many callers hold or wait for key's turn now: its
// waiters, plus one while the turn is held, read at one moment.
func (q *Queue[K]) Queued(key K) int {
	sh, h := q.shard(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if t := sh.turns.Get(h, key); t != nil {
		return 1 + t.waiting.Len()
	}
	return 0
}

// Waiters returns how many callers wait in Take now, on every key.
func (q *Queue[K]) Waiters() int64 { return q.waiters.Load() }

// Len returns the number of keys whose turn is held now. The Queue keeps
// nothing else.
func (q *Queue[K]) Len() int {
	return q.sum(func(t *Table[K, turn[K], *turn[K]]) int { return t.Len() })
}

// Slots returns the number of table slots of every shard now: after a
// storm of keys ends, at most MinSlots per shard.
func (q *Queue[K]) Slots() int {
	return q.sum(func(t *Table[K, turn[K], *turn[K]]) int { return t.Slots() })
}

// sum adds f of every shard's table, under each shard's mutex in turn.
func (q *Queue[K]) sum(f func(*Table[K, turn[K], *turn[K]]) int) int {
	n := 0
	for i := range q.shards {
		sh := &q.shards[i]
		sh.mu.Lock()
		n += f(&sh.turns)
		sh.mu.Unlock()
	}
	return n
}
