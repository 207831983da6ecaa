package postgres

import (
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/claimbus/claimbus/lockstore"
)

// maxHandovers bounds the grants of one lock id handed over in place in a
// row (see handoffs): the release of the holder after that many unlocks on
// the server, so that other nodes waiting for the key get their chance.
const maxHandovers = 64

// handoffs are the releases handed over in place, by lock id: a holder
// whose Release finds a waiter of its lock id on this node leaves its lock
// held on the server, records its unlock request here and passes the turn.
// The waiter that takes the turn claims the entry in attempt and sends a
// renew, which draws its token on the session that still holds the lock
// and confirms the release in the same round trip.
//
// An entry exists only while its lock id's turn is held (by the waiter it
// was left for, or kept by turnQueue.pass for the unlock), and is claimed
// exactly once: by that waiter (attempt), by turnQueue.pass when the turn
// would end with nobody (it unlocks on the server), or by the lock
// connection's drop (the session is gone: the release fails with
// lockstore.ErrLockLost).
type handoffs struct {
	// pending counts the entries, so that attempt and pass skip the shards
	// while none is left.
	pending atomic.Int64
	shards  [queueShards]handoffShard
}

type handoffShard struct {
	mu sync.Mutex
	m  map[LockID]*request // the holder's unlock request
	// Keep neighbouring shards' mutexes on different cache lines.
	_ [64]byte
}

func (h *handoffs) shard(id LockID) *handoffShard {
	return &h.shards[(mixLockID(id)>>32)&(queueShards-1)]
}

// put records r, the unlock request of a lock handed over.
func (h *handoffs) put(r *request) {
	sh := h.shard(r.id)
	sh.mu.Lock()
	if sh.m == nil {
		sh.m = make(map[LockID]*request)
	}
	sh.m[r.id] = r
	h.pending.Add(1)
	sh.mu.Unlock()
}

// has reports whether a release of id waits in place.
func (h *handoffs) has(id LockID) bool {
	if h.pending.Load() == 0 {
		return false
	}
	sh := h.shard(id)
	sh.mu.Lock()
	_, ok := sh.m[id]
	sh.mu.Unlock()
	return ok
}

// claim takes the release of id waiting in place, if any, or, with only
// set, only when it is the unlock request of lock only.
func (h *handoffs) claim(id LockID, only *pgLock) *request {
	if h.pending.Load() == 0 {
		return nil
	}
	sh := h.shard(id)
	sh.mu.Lock()
	r := sh.m[id]
	if r != nil && (only == nil || r.lock == only) {
		delete(sh.m, id)
		h.pending.Add(-1)
	} else {
		r = nil
	}
	sh.mu.Unlock()
	return r
}

// handOver starts handing r's lock over in place: it records the release
// and returns true, unless the connection is no longer the lock's (then
// Release unlocks as usual, and fails).
func (c *lockConn) handOver(r *request) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed || !c.up || r.lock.gen != c.gen {
		return false
	}
	r.lock.handedOver = true
	c.s.handoffs.put(r)
	return true
}

// unlockHandedOver unlocks, for real, a lock whose handover found nobody
// to take it (r is its unlock request, claimed from handoffs); the caller
// keeps its lock id's turn, which the unlock passes on. When the
// connection is gone (it ended the lock, but nothing confirmed it held up
// to now) the release fails and the turn passes here.
func (s *Store) unlockHandedOver(r *request) {
	if err := r.lock.c.submit(r); err != nil {
		s.failHandover(r, err)
		s.queue.q.Pass(r.id)
	}
}

// failHandover ends r, the unlock request of a lock handed over, whose
// connection went away before anything confirmed the lock held.
func (s *Store) failHandover(r *request, err error) {
	r.err = fmt.Errorf("postgres: release %s: %w: %w", r.lock.key, lockstore.ErrLockLost, err)
	r.finish()
}

// handedOff applies a confirmed renew to prev, the unlock request of the
// lock handed over: that lock ends, released (its successor takes its place
// in c.held; the turn is already the successor's).
func (c *lockConn) handedOff(prev *request) {
	l := prev.lock
	c.mu.Lock()
	if c.held[l.id] == l {
		delete(c.held, l.id)
	}
	l.handedOver = false
	c.mu.Unlock()
	l.state.Store(lockReleased)
	c.unload()
	prev.finish()
}
