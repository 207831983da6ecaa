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
	"sync/atomic"
	"time"
)

// Shard counts of a memory store.
const (
	// DefaultMemoryShards is the number of shards of a store whose
	// MemoryConfig leaves Shards at 0.
	DefaultMemoryShards = 64
	// MaxMemoryShards is the largest number of shards a store accepts.
	MaxMemoryShards = 1 << 16
)

// MemoryConfig configures a memory store. The zero value is ready to use:
// locks without leases, the system clock, DefaultMemoryShards shards.
type MemoryConfig struct {
	// TTL, when positive, makes every lock a lease: a lock that is neither
	// released nor refreshed (see Refresher) within TTL of its grant or last
	// Refresh ends, its Lost channel closes and the next waiter gets the key.
	// 0, the default, means no lease: a lock ends at Release, Reset or Close.
	TTL time.Duration
	// Clock stamps grants and runs the lease timers. Default: the system
	// clock. Tests inject a fake clock to end leases when they choose (see
	// lockstoretest.Clock).
	Clock Clock
	// Node names this process in Holder.Node. Default: "hostname/pid".
	Node string
	// Shards is the number of independent parts the key space is split
	// into, each with its own mutex: a power of two up to MaxMemoryShards.
	// Default: DefaultMemoryShards.
	Shards int
}

// Validate reports every problem of the config at once.
func (c MemoryConfig) Validate() error {
	var errs []error
	if c.TTL < 0 {
		errs = append(errs, fmt.Errorf("lockstore: MemoryConfig.TTL is %s: it must be 0 (no lease) or positive", c.TTL))
	}
	if c.Shards < 0 || c.Shards > MaxMemoryShards || c.Shards&(c.Shards-1) != 0 {
		errs = append(errs, fmt.Errorf("lockstore: MemoryConfig.Shards is %d: it must be 0 (default %d) or a power of two up to %d",
			c.Shards, DefaultMemoryShards, MaxMemoryShards))
	}
	return errors.Join(errs...)
}

// Memory is the in-process Store. Each key belongs to one of a fixed number
// of shards, each with its own mutex, map and token counter, so callers on
// different keys rarely meet. A key is in its shard's map exactly while it is
// held; its waiters queue on the holder, and a key with neither holder nor
// waiter takes no memory.
//
// Lock is first come first served per key: a release hands the key straight
// to the oldest waiter, so TryLock never overtakes a queue. Tokens come from
// a per-shard counter that only grows (Reset does not rewind it), which
// makes them strictly increasing per key; they are not comparable across
// keys.
//
// With a TTL, every lock is a lease ended by a timer of the configured
// Clock, so the next waiter is granted the key without anyone calling into
// the store. The only goroutines a Memory starts are those timers' calls;
// Close stops the timers and waits for any call already running.
type Memory struct {
	ttl       time.Duration
	clock     Clock
	node      string
	seed      maphash.Seed
	mask      uint64
	tokenBits int
	shards    []memShard

	closed    atomic.Bool
	closeOnce sync.Once
	// timers counts lease timers that are scheduled and have neither been
	// stopped nor finished running.
	timers sync.WaitGroup
}

// memShard is one part of a Memory's key space. Its fields after m are
// guarded by mu, as are the mutable fields of its locks and waiters.
type memShard struct {
	mu     sync.Mutex
	m      *Memory
	index  int64
	closed bool
	seq    int64
	keys   map[Key]*memLock
	// peak is the largest len(keys) since keys was last rebuilt.
	peak int
	// Keep the hot fields of neighbouring shards on different cache lines.
	_ [64]byte
}

var (
	_ Store    = (*Memory)(nil)
	_ KeyOrder = (*Memory)(nil)
)

// NewMemory returns an empty memory store configured by cfg.
func NewMemory(cfg MemoryConfig) (*Memory, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	n := cmp.Or(cfg.Shards, DefaultMemoryShards)
	m := &Memory{
		ttl:       cfg.TTL,
		clock:     cmp.Or(cfg.Clock, Clock(systemClock{})),
		node:      cfg.Node,
		seed:      maphash.MakeSeed(),
		mask:      uint64(n - 1),
		tokenBits: bits.TrailingZeros(uint(n)),
		shards:    make([]memShard, n),
	}
	if m.node == "" {
		m.node = defaultNode()
	}
	for i := range m.shards {
		s := &m.shards[i]
		s.m = m
		s.index = int64(i)
		s.keys = make(map[Key]*memLock)
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

// shardOf returns the shard that owns key.
func (m *Memory) shardOf(key Key) *memShard {
	h := maphash.String(m.seed, key.Namespace)*0x9e3779b97f4a7c15 ^ maphash.String(m.seed, key.ID)
	return &m.shards[(h^h>>32)&m.mask]
}

// TryLock takes key now, or fails with ErrLocked while it is held. A ctx
// that is already done gets ctx's error; a closed store, ErrClosed.
func (m *Memory) TryLock(ctx context.Context, key Key) (Lock, error) {
	if err := key.Validate(); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s := m.shardOf(key)
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil, ErrClosed
	}
	if _, held := s.keys[key]; held {
		s.mu.Unlock()
		return nil, ErrLocked
	}
	l := &memLock{}
	s.grant(key, l)
	s.mu.Unlock()
	return l, nil
}

// Lock takes key, waiting behind earlier callers until it is released or
// its lease ends, or until ctx ends: then it returns ctx's error and leaves
// the queue, and is never granted. When the grant and the end of ctx race,
// Lock returns the outcome the store reached first; a Lock it returns is
// held. Close fails every waiter with ErrClosed.
func (m *Memory) Lock(ctx context.Context, key Key) (Lock, error) {
	if err := key.Validate(); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s := m.shardOf(key)
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil, ErrClosed
	}
	holder, held := s.keys[key]
	if !held {
		l := &memLock{}
		s.grant(key, l)
		s.mu.Unlock()
		return l, nil
	}
	w := &waiter{ready: make(chan struct{})}
	holder.enqueue(w)
	s.mu.Unlock()

	select {
	case <-w.ready:
	case <-ctx.Done():
		s.mu.Lock()
		if w.state == waiting {
			s.keys[key].dequeue(w)
			s.mu.Unlock()
			return nil, ctx.Err()
		}
		s.mu.Unlock()
	}
	if w.state == failed {
		return nil, w.err
	}
	return &w.lock, nil
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
		for _, l := range s.keys {
			hs = append(hs, Holder{Key: l.key, Token: l.token, AcquiredAt: l.at, Node: m.node})
		}
		s.mu.Unlock()
	}
	slices.SortFunc(hs, func(a, b Holder) int { return CompareKeys(a.Key, b.Key) })
	return hs, nil
}

// Reset ends every lock held now, as if its lease had run out: its Lost
// channel closes and the key goes to its next waiter, if any, with a new,
// greater token. Tokens are never rewound. It is meant for tests.
func (m *Memory) Reset(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	var locks []*memLock
	for i := range m.shards {
		s := &m.shards[i]
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			return ErrClosed
		}
		locks = locks[:0]
		for _, l := range s.keys {
			locks = append(locks, l)
		}
		for _, l := range locks {
			s.lose(l)
		}
		s.mu.Unlock()
	}
	return nil
}

// Close ends every lock (closing its Lost channel), fails every waiter with
// ErrClosed, stops the lease timers and waits for any timer call already
// running. Later calls on the store fail with ErrClosed; Close itself is
// idempotent and returns nil.
func (m *Memory) Close() error {
	m.closeOnce.Do(func() {
		m.closed.Store(true)
		for i := range m.shards {
			s := &m.shards[i]
			s.mu.Lock()
			s.closed = true
			for _, l := range s.keys {
				l.failWaiters(ErrClosed)
				l.state = lost
				s.stopLease(l)
				if l.lost != nil {
					close(l.lost)
				}
			}
			s.keys = nil
			s.peak = 0
			s.mu.Unlock()
		}
		m.timers.Wait()
	})
	return nil
}

// Waiting returns the number of Lock calls waiting for key now, not counting
// its holder. Tests use it to know that a waiter has queued.
func (m *Memory) Waiting(key Key) int {
	s := m.shardOf(key)
	s.mu.Lock()
	defer s.mu.Unlock()
	if l := s.keys[key]; l != nil && l.queue != nil {
		return l.queue.n
	}
	return 0
}

// Len returns the number of keys the store keeps now: those held (their
// waiters queue on them). Keys with neither holder nor waiter are not kept.
func (m *Memory) Len() int {
	n := 0
	for i := range m.shards {
		s := &m.shards[i]
		s.mu.Lock()
		n += len(s.keys)
		s.mu.Unlock()
	}
	return n
}

// CompareKeys orders keys for callers taking several (see SortKeys): the
// memory store has no order of its own, so it is lockstore.CompareKeys.
func (m *Memory) CompareKeys(a, b Key) int { return CompareKeys(a, b) }

// grant makes l the holder of key, with a fresh token and lease. The caller
// holds s.mu and has checked that the shard is open.
func (s *memShard) grant(key Key, l *memLock) {
	s.seq++
	l.shard = s
	l.key = key
	l.token = s.seq<<s.m.tokenBits | s.index
	l.at = s.m.clock.Now()
	l.state = held
	s.keys[key] = l
	if n := len(s.keys); n > s.peak {
		s.peak = n
	}
	if s.m.ttl > 0 {
		s.startLease(l)
	}
}

// pass gives the key of old, which has just ended, to its oldest waiter, or
// forgets the key when nobody waits. The caller holds s.mu.
func (s *memShard) pass(old *memLock) {
	q := old.queue
	old.queue = nil
	if q == nil {
		delete(s.keys, old.key)
		s.shrink()
		return
	}
	w := q.pop()
	if q.n > 0 {
		w.lock.queue = q
	}
	s.grant(old.key, &w.lock)
	w.state = granted
	close(w.ready)
}

// lose ends l for a reason other than its Release: its Lost channel closes
// and the key passes on. The caller holds s.mu and l is held.
func (s *memShard) lose(l *memLock) {
	l.state = lost
	s.stopLease(l)
	if l.lost != nil {
		close(l.lost)
	}
	s.pass(l)
}

// shrinkMin is the smallest peak size from which a shard's map is rebuilt
// when most of its keys are gone: Go maps never give memory back.
const shrinkMin = 1024

// shrink rebuilds the shard's map once it holds an eighth of its peak, so
// that a storm of keys leaves no memory behind. The caller holds s.mu.
func (s *memShard) shrink() {
	n := len(s.keys)
	if s.peak < shrinkMin || n > s.peak/8 {
		return
	}
	fresh := make(map[Key]*memLock, n)
	for k, l := range s.keys {
		fresh[k] = l
	}
	s.keys = fresh
	s.peak = n
}

// startLease schedules the end of l's lease one TTL from now. The caller
// holds s.mu and the shard is open.
func (s *memShard) startLease(l *memLock) {
	ls := &lease{}
	l.lease = ls
	s.m.timers.Add(1)
	ls.timer = s.m.clock.AfterFunc(s.m.ttl, func() { s.expire(l, ls) })
}

// stopLease cancels l's pending lease timer, if any. The caller holds s.mu.
func (s *memShard) stopLease(l *memLock) {
	if l.lease == nil {
		return
	}
	if l.lease.timer.Stop() {
		s.m.timers.Done()
	}
	l.lease = nil
}

// expire runs when the lease ls of l runs out: unless l was released or
// refreshed meanwhile, it ends l.
func (s *memShard) expire(l *memLock, ls *lease) {
	defer s.m.timers.Done()
	s.mu.Lock()
	defer s.mu.Unlock()
	if l.state == held && l.lease == ls {
		l.lease = nil
		s.lose(l)
	}
}
