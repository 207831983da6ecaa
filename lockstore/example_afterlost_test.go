package lockstore_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/claimbus/claimbus/lockstore"
)

// AfterLost cancels a job's context when its lock is lost, with the loss
// as the cause; stop ends the watch when the job is done.
func ExampleAfterLost() {
	store, err := lockstore.NewMemory(lockstore.MemoryConfig{})
	if err != nil {
		panic(err)
	}
	defer store.Close()
	l, err := store.TryLock(context.Background(), lockstore.Key{Namespace: "job", ID: "nightly"})
	if err != nil {
		panic(err)
	}

	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	stop := lockstore.AfterLost(l, func() { cancel(lockstore.ErrLockLost) })
	defer stop()

	// The memory store's Reset ends every lock and, before it returns,
	// calls the functions registered on them.
	if err := store.Reset(context.Background()); err != nil {
		panic(err)
	}
	fmt.Println("job cancelled:", errors.Is(context.Cause(ctx), lockstore.ErrLockLost))
	fmt.Println("stop after the loss:", stop())
	// Output:
	// job cancelled: true
	// stop after the loss: false
}
