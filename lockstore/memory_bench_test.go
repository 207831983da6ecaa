package lockstore_test

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/claimbus/claimbus/lockstore"
)

// The benchmarks compare the memory store (impl=claimbus) with three
// baselines:
//   - impl=syncmutex: a bare sync.Mutex Lock/Unlock, the floor;
//   - impl=mapmutex: the plain design, a lock table (owner and
//     acquired-at per held key) in a map behind one mutex;
//   - impl=genserver: one goroutine that owns that table
//     and serves acquire and release calls over a channel.
//
// Run them with
//
//	go test -run '^$' -bench . -benchmem -count 5 -cpu 1,2 ./lockstore/
//
// and compare with `benchstat -col /impl` (make bench-compare does both).

// BenchmarkUncontended is TryLock then Release of one key by one goroutine.
func BenchmarkUncontended(b *testing.B) {
	key := lockstore.Key{Namespace: "bench", ID: "transfer-42"}
	b.Run("impl=claimbus", func(b *testing.B) {
		m := newMemory(b, lockstore.MemoryConfig{})
		ctx := context.Background()
		b.ReportAllocs()
		for b.Loop() {
			l, err := m.TryLock(ctx, key)
			if err != nil {
				b.Fatal(err)
			}
			_ = l.Release(ctx)
		}
	})
	b.Run("impl=genserver", func(b *testing.B) {
		g := newGenServer(b)
		c := g.client()
		b.ReportAllocs()
		for b.Loop() {
			if err := c.acquire(key); err != nil {
				b.Fatal(err)
			}
			c.release(key)
		}
	})
	b.Run("impl=mapmutex", func(b *testing.B) {
		s := newMapMutex()
		b.ReportAllocs()
		for b.Loop() {
			if err := s.acquire(key, 1); err != nil {
				b.Fatal(err)
			}
			s.release(key)
		}
	})
	b.Run("impl=syncmutex", func(b *testing.B) {
		var mu sync.Mutex
		b.ReportAllocs()
		for b.Loop() {
			mu.Lock()
			mu.Unlock() //nolint:staticcheck // the empty critical section is what is measured
		}
	})
}

// BenchmarkDistinctKeysParallel is TryLock then Release with b.RunParallel,
// each goroutine on its own key: throughput should grow with -cpu.
func BenchmarkDistinctKeysParallel(b *testing.B) {
	var ids atomic.Int64
	ownKey := func() lockstore.Key {
		return lockstore.Key{Namespace: "bench", ID: "transfer-" + strconv.FormatInt(ids.Add(1), 10)}
	}
	b.Run("impl=claimbus", func(b *testing.B) {
		m := newMemory(b, lockstore.MemoryConfig{})
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			ctx, key := context.Background(), ownKey()
			for pb.Next() {
				l, err := m.TryLock(ctx, key)
				if err != nil {
					b.Error(err)
					return
				}
				_ = l.Release(ctx)
			}
		})
	})
	b.Run("impl=genserver", func(b *testing.B) {
		g := newGenServer(b)
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			c, key := g.client(), ownKey()
			for pb.Next() {
				if err := c.acquire(key); err != nil {
					b.Error(err)
					return
				}
				c.release(key)
			}
		})
	})
	b.Run("impl=mapmutex", func(b *testing.B) {
		s := newMapMutex()
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			key, owner := ownKey(), owners.Add(1)
			for pb.Next() {
				if err := s.acquire(key, owner); err != nil {
					b.Error(err)
					return
				}
				s.release(key)
			}
		})
	})
	b.Run("impl=syncmutex", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			var mu sync.Mutex
			for pb.Next() {
				mu.Lock()
				mu.Unlock() //nolint:staticcheck // the empty critical section is what is measured
			}
		})
	})
}

// BenchmarkHotKey64 is 64 goroutines taking one key in turn with Lock and
// Release; it reports grants per second.
func BenchmarkHotKey64(b *testing.B) {
	key := lockstore.Key{Namespace: "bench", ID: "hot"}
	b.Run("impl=claimbus", func(b *testing.B) {
		m := newMemory(b, lockstore.MemoryConfig{})
		ctx := context.Background()
		hotKey(b, func() error {
			l, err := m.Lock(ctx, key)
			if err != nil {
				return err
			}
			return l.Release(ctx)
		})
	})
	b.Run("impl=syncmutex", func(b *testing.B) {
		var mu sync.Mutex
		hotKey(b, func() error {
			mu.Lock()
			mu.Unlock() //nolint:staticcheck // the empty critical section is what is measured
			return nil
		})
	})
}

// hotKey runs b.N grants spread over 64 goroutines and reports grants/s.
func hotKey(b *testing.B, grant func() error) {
	const goroutines = 64
	b.ReportAllocs()
	var (
		next atomic.Int64
		wg   sync.WaitGroup
		once sync.Once
		fail error
	)
	b.ResetTimer()
	for range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for next.Add(1) <= int64(b.N) {
				if err := grant(); err != nil {
					once.Do(func() { fail = err })
					return
				}
			}
		}()
	}
	wg.Wait()
	b.StopTimer()
	if fail != nil {
		b.Fatal(fail)
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "grants/s")
}

// lockRow is what a plain lock table keeps per held key: its owner and
// when it was acquired. Both map baselines record it, as
// the memory store records its holder's token and grant time.
type lockRow struct {
	owner uint64
	at    time.Time
}

// mapMutex is the plain design: the lock table in a map behind one mutex.
type mapMutex struct {
	mu   sync.Mutex
	held map[lockstore.Key]lockRow
}

func newMapMutex() *mapMutex { return &mapMutex{held: make(map[lockstore.Key]lockRow)} }

func (s *mapMutex) acquire(key lockstore.Key, owner uint64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.held[key]; ok {
		return lockstore.ErrLocked
	}
	s.held[key] = lockRow{owner: owner, at: time.Now()}
	return nil
}

func (s *mapMutex) release(key lockstore.Key) {
	s.mu.Lock()
	delete(s.held, key)
	s.mu.Unlock()
}

// genServer is the single-goroutine design: one goroutine owns the lock table and
// answers acquire and release calls sent over a channel, each caller
// waiting for its reply.
type genServer struct {
	reqs chan genRequest
	done chan struct{}
}

type genRequest struct {
	release bool
	key     lockstore.Key
	owner   uint64
	reply   chan error
}

func newGenServer(b *testing.B) *genServer {
	g := &genServer{reqs: make(chan genRequest), done: make(chan struct{})}
	go g.serve()
	b.Cleanup(func() {
		close(g.reqs)
		<-g.done
	})
	return g
}

func (g *genServer) serve() {
	defer close(g.done)
	held := make(map[lockstore.Key]lockRow)
	for req := range g.reqs {
		switch _, ok := held[req.key]; {
		case req.release:
			delete(held, req.key)
			req.reply <- nil
		case ok:
			req.reply <- lockstore.ErrLocked
		default:
			held[req.key] = lockRow{owner: req.owner, at: time.Now()}
			req.reply <- nil
		}
	}
}

var owners atomic.Uint64

// genClient is one caller of a genServer, with its own reply channel.
type genClient struct {
	g     *genServer
	owner uint64
	reply chan error
}

func (g *genServer) client() genClient {
	return genClient{g: g, owner: owners.Add(1), reply: make(chan error, 1)}
}

func (c genClient) call(release bool, key lockstore.Key) error {
	c.g.reqs <- genRequest{release: release, key: key, owner: c.owner, reply: c.reply}
	return <-c.reply
}

func (c genClient) acquire(key lockstore.Key) error { return c.call(false, key) }

func (c genClient) release(key lockstore.Key) {
	if err := c.call(true, key); err != nil {
		panic(err)
	}
}
