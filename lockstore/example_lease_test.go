package lockstore_test

import (
	"context"
	"fmt"
	"time"

	"github.com/claimbus/claimbus/lockstore"
	"github.com/claimbus/claimbus/lockstore/lockstoretest"
)

// With a TTL every lock is a lease: unless refreshed, it ends TTL after its
// grant, its Lost channel closes, its Release reports the loss and the key
// passes on. The fake clock of lockstoretest decides when time passes.
func ExampleMemoryConfig_lease() {
	ctx := context.Background()
	clock := lockstoretest.NewClock(time.Date(2026, 1, 1, 9, 0, 0, 0, time.UTC))
	store, err := lockstore.NewMemory(lockstore.MemoryConfig{TTL: time.Minute, Clock: clock})
	if err != nil {
		panic(err)
	}
	defer store.Close()
	key := lockstore.Key{Namespace: "transfer", ID: "42"}

	l, err := store.TryLock(ctx, key)
	if err != nil {
		panic(err)
	}
	clock.Advance(50 * time.Second)
	if err := l.(lockstore.Refresher).Refresh(ctx); err != nil {
		panic(err)
	}
	clock.Advance(50 * time.Second)
	select {
	case <-l.Lost():
		fmt.Println("lost at 09:01:40")
	default:
		fmt.Println("refreshed at 09:00:50, still held at 09:01:40")
	}

	clock.Advance(10 * time.Second)
	<-l.Lost()
	fmt.Println("lost at", clock.Now().Format(time.TimeOnly))
	err = l.(lockstore.Refresher).Refresh(ctx)
	fmt.Println("Refresh:", err)
	fmt.Println("Release:", l.Release(ctx))

	next, err := store.TryLock(ctx, key)
	if err != nil {
		panic(err)
	}
	fmt.Println("next holds", next.Key(), "since", next.AcquiredAt().Format(time.TimeOnly))
	// Output:
	// refreshed at 09:00:50, still held at 09:01:40
	// lost at 09:01:50
	// Refresh: lockstore: refresh transfer/42: lockstore: lock lost
	// Release: lockstore: release transfer/42: lockstore: lock lost
	// next holds transfer/42 since 09:01:50
}
