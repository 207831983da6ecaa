package lockstore_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"

	"github.com/claimbus/claimbus/lockstore"
)

// TryLock takes a free key at once and fails with ErrLocked while it is
// held; Lock waits its turn.
func ExampleNewMemory() {
	ctx := context.Background()
	store, err := lockstore.NewMemory(lockstore.MemoryConfig{})
	if err != nil {
		panic(err)
	}
	defer store.Close()
	key := lockstore.Key{Namespace: "transfer", ID: "42"}

	first, err := store.TryLock(ctx, key)
	if err != nil {
		panic(err)
	}
	fmt.Println("first holds", first.Key())

	if _, err := store.TryLock(ctx, key); errors.Is(err, lockstore.ErrLocked) {
		fmt.Println("TryLock:", err)
	}

	granted := make(chan lockstore.Lock)
	go func() {
		second, err := store.Lock(ctx, key) // waits for first
		if err != nil {
			panic(err)
		}
		granted <- second
	}()
	for store.Waiting(key) == 0 {
		runtime.Gosched() // until the second caller queues
	}

	fmt.Println("first releases")
	if err := first.Release(ctx); err != nil {
		panic(err)
	}
	second := <-granted
	fmt.Println("second holds", second.Key(), "with a newer token:", second.Token() > first.Token())
	if err := second.Release(ctx); err != nil {
		panic(err)
	}
	// Output:
	// first holds transfer/42
	// TryLock: lockstore: locked
	// first releases
	// second holds transfer/42 with a newer token: true
}
