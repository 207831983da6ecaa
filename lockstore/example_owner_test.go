package lockstore_test

import (
	"context"
	"fmt"

	"github.com/claimbus/claimbus/lockstore"
)

// A lock belongs to whoever holds the Lock value, not to a context: the ctx
// given to Lock only bounds the wait. A caller who wants the lock to end
// with an owner (a session, a job) binds the two with context.AfterFunc.
func Example_ownerContext() {
	ctx := context.Background()
	store, err := lockstore.NewMemory(lockstore.MemoryConfig{})
	if err != nil {
		panic(err)
	}
	defer store.Close()
	key := lockstore.Key{Namespace: "transfer", ID: "42"}

	ownerCtx, ownerGone := context.WithCancel(ctx)
	l, err := store.Lock(ctx, key)
	if err != nil {
		panic(err)
	}
	stop := context.AfterFunc(ownerCtx, func() { _ = l.Release(context.Background()) })
	defer func() {
		stop()
		_ = l.Release(context.Background())
	}()
	fmt.Println("owner holds", l.Key())

	ownerGone() // the owner ends before releasing: AfterFunc releases for it

	next, err := store.Lock(ctx, key) // granted once that release has run
	if err != nil {
		panic(err)
	}
	fmt.Println("next holds", next.Key(), "with a newer token:", next.Token() > l.Token())
	select {
	case <-l.Lost():
		fmt.Println("the owner's lock was lost")
	default:
		fmt.Println("the owner's lock was released, not lost")
	}
	_ = next.Release(ctx)
	// Output:
	// owner holds transfer/42
	// next holds transfer/42 with a newer token: true
	// the owner's lock was released, not lost
}
