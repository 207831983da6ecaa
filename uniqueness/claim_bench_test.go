package uniqueness

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/claimbus/claimbus/lockstore"
)

// claimRelease claims k with a lookup that finds it free, then releases it.
func claimRelease(ctx context.Context, c *claimer, k lockstore.Key) error {
	cl, err := c.Claim(ctx, k, notTaken)
	if err != nil {
		return err
	}
	return cl.Release(ctx)
}

// BenchmarkClaimRelease is Claim+Release of one key by one goroutine with a
// lookup that returns false, on the memory store.
func BenchmarkClaimRelease(b *testing.B) {
	store := newMemory(b, lockstore.MemoryConfig{})
	c := makeClaimer(store)
	ctx := context.Background()
	k := key("ann@x.org")
	b.ReportAllocs()
	for b.Loop() {
		if err := claimRelease(ctx, c, k); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkLockRelease is the floor under BenchmarkClaimRelease: the memory
// store's Lock+Release alone.
func BenchmarkLockRelease(b *testing.B) {
	store := newMemory(b, lockstore.MemoryConfig{})
	ctx := context.Background()
	k := key("ann@x.org")
	b.ReportAllocs()
	for b.Loop() {
		l, err := store.Lock(ctx, k)
		if err != nil {
			b.Fatal(err)
		}
		if err := l.Release(ctx); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkClaimReleaseParallel claims distinct keys from every goroutine.
func BenchmarkClaimReleaseParallel(b *testing.B) {
	store := newMemory(b, lockstore.MemoryConfig{})
	c := makeClaimer(store)
	ctx := context.Background()
	var next atomic.Int64
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		k := key("user" + strconv.FormatInt(next.Add(1), 10))
		for pb.Next() {
			if err := claimRelease(ctx, c, k); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

// BenchmarkClaimReleaseHotKey has 64 goroutines claim one key, so that most
// claims wait and every release re-checks.
func BenchmarkClaimReleaseHotKey(b *testing.B) {
	store := newMemory(b, lockstore.MemoryConfig{})
	c := makeClaimer(store)
	ctx := context.Background()
	k := key("ann@x.org")
	b.SetParallelism(64)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if err := claimRelease(ctx, c, k); err != nil {
				b.Error(err)
				return
			}
		}
	})
}
