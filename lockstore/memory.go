package lockstore

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"math/bits"
	"os"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/claimbus/claimbus/internal/afterlost"
	"github.com/claimbus/claimbus/internal/keyqueue"
)

// Shard counts of a memory store.
const (
	// defaultMemoryShards is the number of shards of a store whose
	// MemoryConfig leaves Shards at 0.
	defaultMemoryShards = 64
	// maxMemoryShards is the largest number of shards a store accepts.
	maxMemoryShards = 1 << 16
)

// MemoryConfig configures a memory store. The zero value is ready to use:
// locks without leases, the system clock, 64 shards.
type MemoryConfig struct {
	// TTL, when positive, makes every lock a lease: a lock that is neither
	// released nor refreshed (see Refresher) within TTL of its grant or last
	// Refresh ends, its Lost channel closes, its Release reports ErrLockLost
	// and the next waiter gets the key.
	// 0, the default, means no lease: a lock ends at Release, Reset or Close.
	TTL time.Duration
	// Clock stamps grants and runs the lease timers. Default: the system
	// clock. Tests inject a fake clock to end leases when they choose (see
	// lockstoretest.Clock).
	Clock Clock
	// Node names this process in Holder.Node. Default: "hostname/pid".
	Node string
	// Shards is the number of independent parts the key space is split
	// into, each with its own mutex: a power of two up to 65536.
	// Default: 64.
	Shards int
}

// Validate reports every problem of the config at once.
func (c MemoryConfig) Validate() error {
	var errs []error
	if c.TTL < 0 {
		errs = append(errs, fmt.Errorf("lockstore: MemoryConfig.TTL is %s: it must be 0 (no lease) or positive", c.TTL))
	}
	if c.Shards < 0 || c.Shards > maxMemoryShards || c.Shards&(c.Shards-1) != 0 {
		errs = append(errs, fmt.Errorf("lockstore: MemoryConfig.Shards is %d: it must be 0 (default %d) or a power of two up to %d",
			c.Shards, defaultMemoryShards, maxMemoryShards))
	}
	return errors.Join(errs...)
}

// Memory is the in-process Store. Each key belongs to one of a fixed number
// of shards, each with its own mutex, table of held locks and token counter,
// so callers on different keys rarely meet. A key is in its shard's table
// exactly while it is held; its waiters queue on the holder, and a key with
// neither holder nor waiter takes no memory.
//
// Lock is first come first served per key: a release hands the key straight
// to the oldest waiter, so TryLock never overtakes a queue. Tokens come from
// a per-shard counter that only grows (Reset does not rewind it), which
// makes them strictly increasing per key, and unique in the store.
//
// Grants are stamped with the clock's time at the store's creation plus
// the monotonic time elapsed since, which costs half of a time.Now call.
//
// With a TTL, every lock is a lease ended by a timer of the configured
// Clock, so the next waiter is granted the key without anyone calling into
// the store. The only goroutines a Memory starts are those timers' calls;
// Close stops the timers and waits for any call already running.
type Memory struct {
	ttl   time.Duration
	clock Clock
	// base is the clock's time when the store was made; grants record their
	// offset from it, read from the monotonic clock alone when clock is the
	// system clock.
	base     time.Time
	sysClock bool
	node     string
	seed     maphash.Seed
	// hashMask is all ones; a test clears it to make every key collide.
	hashMask uint64
	// shardBits is log2(len(shards)); the top shardBits bits of a key's
	// 32-bit hash, h>>shardShift, pick its shard (its table probes from
	// the low bits).
	shardBits  uint
	shardShift uint
	shards     []memShard

	closeOnce sync.Once
	// timers counts lease timers that are scheduled and have neither been
	// stopped nor finished running.
	timers sync.WaitGroup
}

// memShard is one part of a Memory's key space. Its fields after index
// are guarded by mu, as are the mutable fields of its locks and waiters.
type memShard struct {
	mu     sync.Mutex
	m      *Memory
	index  int64
	closed bool
	// seq counts the grants of the shard (see nextToken).
	seq int64
	// lost counts the locks of the shard that ended lost.
	lost  int64
	locks keyqueue.Table[Key, memLock, *memLock]
	// Keep the hot fields of neighbouring shards on different cache lines.
	_ [64]byte
}

var (
	_ Store         = (*Memory)(nil)
	_ StatsReporter = (*Memory)(nil)
)

// NewMemory returns an empty memory store configured by cfg.
func NewMemory(cfg MemoryConfig) (*Memory, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	n := cmp.Or(cfg.Shards, defaultMemoryShards)
	m := &Memory{
		ttl:       cfg.TTL,
		clock:     cmp.Or(cfg.Clock, Clock(systemClock{})),
		node:      cmp.Or(cfg.Node, defaultNode()),
		seed:      maphash.MakeSeed(),
		hashMask:  ^uint64(0),
		shardBits: uint(bits.TrailingZeros(uint(n))),
		shards:    make([]memShard, n),
	}
	m.shardShift = 32 - m.shardBits
	_, m.sysClock = m.clock.(systemClock)
	m.base = m.clock.Now()
	for i := range m.shards {
		s := &m.shards[i]
		s.m = m
		s.index = int64(i)
	}
	return m, nil
}

func defaultNode() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "localhost"
	}
	return host + "/" + strconv.Itoa(os.Getpid())
}

// hash returns the hash of key. Its top bits pick the key's shard, its low
// bits the key's place in the shard's table.
func (m *Memory) hash(key Key) uint64 {
	h := maphash.String(m.seed, key.Namespace)
	h = (h ^ h>>29) * 0xbf58476d1ce4e5b9 // mix before adding the id's hash
	h ^= maphash.String(m.seed, key.ID)
	// Folded to 32 bits, so that a lock keeps its hash in the word its
	// state leaves free (see memLock).
	return uint64(uint32(h^h>>32)) & m.hashMask
}

// shardOf returns the shard of the key of hash h.
func (m *Memory) shardOf(h uint64) *memShard {
	return &m.shards[h>>m.shardShift]
}

// stamp returns the time now as an offset from m.base.
func (m *Memory) stamp() time.Duration {
	if m.sysClock {
		return time.Since(m.base)
	}
	return m.clock.Now().Sub(m.base)
}

// TryLock takes key now, or fails with ErrLocked while it is held. A ctx
// that is already done gets ctx's error; a closed store, ErrClosed.
func (m *Memory) TryLock(ctx context.Context, key Key) (Lock, error) {
	s, h, err := m.lockShard(ctx, key)
	if err != nil {
		return nil, err
	}
	if s.locks.Get(h, key) != nil {
		s.mu.Unlock()
		return nil, ErrLocked
	}
	l := s.grant(h, key)
	s.mu.Unlock()
	return l, nil
}

// Lock takes key, waiting behind earlier callers until it is released or
// its lease ends, or until ctx ends: then it returns ctx's error and leaves
// the queue, and is never granted. When the grant and the end of ctx race,
// Lock returns the outcome the store reached first; a Lock it returns is
// held. Close fails every waiter with ErrClosed.
func (m *Memory) Lock(ctx context.Context, key Key) (Lock, error) {
	s, h, err := m.lockShard(ctx, key)
	if err != nil {
		return nil, err
	}
	holder := s.locks.Get(h, key)
	if holder == nil {
		l := s.grant(h, key)
		s.mu.Unlock()
		return l, nil
	}
	w := &waiter{Value: memWait{ready: make(chan struct{})}}
	holder.extension().queue.Push(w)
	s.mu.Unlock()

	select {
	case <-w.Value.ready:
	case <-ctx.Done():
		s.mu.Lock()
		if w.Value.state == waiting {
			// The key's holder may have changed, never its queue.
			s.locks.Get(h, key).ext.queue.Remove(w)
			s.mu.Unlock()
			return nil, ctx.Err()
		}
		s.mu.Unlock()
	}
	if w.Value.state == failed {
		return nil, w.Value.err
	}
	return &w.Value.lock, nil
}

// lockShard checks what TryLock and Lock check first (a valid key, a live
// ctx, an open shard) and returns key's shard, locked, and key's hash.
func (m *Memory) lockShard(ctx context.Context, key Key) (*memShard, uint64, error) {
	if err := key.Validate(); err != nil {
		return nil, 0, err
	}
	if err := ctx.Err(); err != nil {
		return nil, 0, err
	}
	h := m.hash(key)
	s := m.shardOf(h)
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil, 0, ErrClosed
	}
	return s, h, nil
}

// Held lists the locks held now, ordered by key.
func (m *Memory) Held(ctx context.Context) ([]Holder, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	var hs []Holder
	for i := range m.shards {
		s := &m.shards[i]
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			return nil, ErrClosed
		}
		for l := range s.locks.All {
			hs = append(hs, Holder{Key: l.key, Token: l.token, AcquiredAt: l.AcquiredAt(), Node: m.node})
		}
		s.mu.Unlock()
	}
	slices.SortFunc(hs, func(a, b Holder) int {
		return cmp.Or(cmp.Compare(a.Key.Namespace, b.Key.Namespace), cmp.Compare(a.Key.ID, b.Key.ID))
	})
	return hs, nil
}

// Reset ends every lock held now, as if its lease had run out: its Lost
// channel closes, its Release reports ErrLockLost, and the key goes to its
// next waiter, if any, with a new, greater token. Tokens are never rewound.
// The functions registered with AfterLost on those locks have run when it
// returns. It is meant for tests.
func (m *Memory) Reset(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	var locks []*memLock
	var fire []afterlost.Chain
	for i := range m.shards {
		s := &m.shards[i]
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			return ErrClosed
		}
		locks = slices.AppendSeq(locks[:0], s.locks.All)
		for _, l := range locks {
			fire = append(fire, s.end(l, lost))
		}
		s.mu.Unlock()
		for _, c := range fire {
			c.Fire()
		}
		fire = fire[:0]
	}
	return nil
}

// Close ends every lock (closing its Lost channel; its Release then
// returns an error matching both ErrLockLost and ErrClosed), fails every
// waiter with ErrClosed, runs the functions registered with AfterLost on
// those locks, stops the lease timers and waits for any timer call already
// running. Later calls on the store fail with ErrClosed; Close itself is
// idempotent and returns nil.
func (m *Memory) Close() error {
	m.closeOnce.Do(func() {
		var fire []afterlost.Chain
		for i := range m.shards {
			s := &m.shards[i]
			s.mu.Lock()
			s.closed = true
			for l := range s.locks.All {
				l.state = lost
				s.lost++
				fire = append(fire, l.after.Take())
				if e := l.ext; e != nil {
					e.failWaiters(ErrClosed)
					s.stopLease(e)
					if e.lost != nil {
						close(e.lost)
					}
				}
			}
			s.locks = keyqueue.Table[Key, memLock, *memLock]{}
			s.mu.Unlock()
		}
		for _, c := range fire {
			c.Fire()
		}
		m.timers.Wait()
	})
	return nil
}

// Waiting returns the number of Lock calls waiting for key now, not counting
// its holder. Tests use it to know that a waiter has queued.
func (m *Memory) Waiting(key Key) int {
	h := m.hash(key)
	s := m.shardOf(h)
	s.mu.Lock()
	defer s.mu.Unlock()
	if l := s.locks.Get(h, key); l != nil && l.ext != nil {
		return l.ext.queue.Len()
	}
	return 0
}

// Stats reports the locks held now (Held), the Lock calls waiting now
// (Waiting) and the locks that ended lost, by lease expiry, Reset or Close
// (LocksLost). It visits every held key, under each shard's lock in turn.
func (m *Memory) Stats() Stats {
	var st Stats
	for i := range m.shards {
		s := &m.shards[i]
		s.mu.Lock()
		st.Held += int64(s.locks.Len())
		st.LocksLost += s.lost
		for l := range s.locks.All {
			if l.ext != nil {
				st.Waiting += int64(l.ext.queue.Len())
			}
		}
		s.mu.Unlock()
	}
	return st
}

// grant grants key, of hash h and free, with a fresh token and lease, and
// puts the lock in the table. The caller holds s.mu and has checked that
// the shard is open.
func (s *memShard) grant(h uint64, key Key) *memLock {
	l := &memLock{shard: s, key: key, hash: uint32(h), token: s.nextToken(), at: s.m.stamp(), state: held}
	if s.m.ttl > 0 {
		s.startLease(l)
	}
	s.locks.Put(h, l)
	return l
}

// nextToken counts a grant of the shard and returns its token: the count
// above the shard's index, so that it grows with every grant of the shard
// and no other shard gives it. The caller holds s.mu.
func (s *memShard) nextToken() int64 {
	s.seq++
	return s.seq<<s.m.shardBits | s.index
}

// handTo hands the key of l, which has ended, to the waiter w, whose lock
// takes l's place in the table with a fresh token and lease and the rest of
// l's queue. The caller holds s.mu.
func (s *memShard) handTo(l *memLock, w *waiter) {
	v := &w.Value
	v.lock = memLock{shard: s, key: l.key, hash: l.hash, token: s.nextToken(), at: s.m.stamp(), state: held, ext: &v.ext}
	v.ext.queue, l.ext.queue = l.ext.queue, keyqueue.List[memWait]{}
	if s.m.ttl > 0 {
		s.startLease(&v.lock)
	}
	s.locks.Set(uint64(l.hash), &w.Value.lock)
	v.state = granted
	close(v.ready)
}

// end ends the held lock l, as released by its owner or lost: a lost lock's
// Lost channel closes. The key goes to its oldest waiter, or is forgotten
// when nobody waits. It returns the AfterLost registrations to fire, once
// s.mu is released, when l is lost; those of a released lock are dropped.
// The caller holds s.mu.
func (s *memShard) end(l *memLock, how lockState) (fire afterlost.Chain) {
	l.state = how
	fire = l.after.Take()
	if how == lost {
		s.lost++
	} else {
		fire = afterlost.Chain{} // a released lock's registrations are dropped
	}
	e := l.ext
	if e == nil {
		s.locks.Delete(uint64(l.hash), l.key)
		return fire
	}
	s.stopLease(e)
	if how == lost && e.lost != nil {
		close(e.lost)
	}
	if e.queue.Len() == 0 {
		s.locks.Delete(uint64(l.hash), l.key)
		return fire
	}
	s.handTo(l, e.queue.Pop())
	return fire
}

// startLease schedules the end of l's lease one TTL from now. The caller
// holds s.mu and the shard is open.
func (s *memShard) startLease(l *memLock) {
	ls := &lease{}
	e := l.extension()
	e.lease = ls
	s.m.timers.Add(1)
	ls.timer = s.m.clock.AfterFunc(s.m.ttl, func() { s.expire(l, ls) })
}

// stopLease cancels the pending lease timer of a lock, if any. The caller
// holds s.mu.
func (s *memShard) stopLease(e *lockExt) {
	if e.lease == nil {
		return
	}
	if e.lease.timer.Stop() {
		s.m.timers.Done()
	}
	e.lease = nil
}

// expire runs when the lease ls of l runs out: unless l was released or
// refreshed meanwhile, it ends l.
func (s *memShard) expire(l *memLock, ls *lease) {
	defer s.m.timers.Done()
	var fire afterlost.Chain
	s.mu.Lock()
	if l.state == held && l.ext.lease == ls {
		l.ext.lease = nil
		fire = s.end(l, lost)
	}
	s.mu.Unlock()
	fire.Fire()
}
