package middleware_test

import (
	"context"
	"fmt"

	"github.com/claimbus/claimbus/lockstore"
	"github.com/claimbus/claimbus/middleware"
)

// CompleteTransfer is a command on one transfer.
type CompleteTransfer struct {
	TransferID string
}

// One transfer at a time: a command on a transfer another command holds is
// halted as locked, and the lock is released whatever the outcome.
func ExampleLock() {
	store, err := lockstore.NewMemory(lockstore.MemoryConfig{})
	if err != nil {
		panic(err)
	}
	defer store.Close()

	lock, err := middleware.Lock(middleware.LockConfig{
		Locker: store,
		Keys: func(cmd any) []lockstore.Key {
			if c, ok := cmd.(*CompleteTransfer); ok {
				return []lockstore.Key{{Namespace: "transfer", ID: c.TransferID}}
			}
			return nil // other commands take no lock
		},
	})
	if err != nil {
		panic(err)
	}
	runner, err := middleware.NewRunner(middleware.RunnerConfig{Middleware: []middleware.Middleware{lock}})
	if err != nil {
		panic(err)
	}

	ctx := context.Background()
	complete := func(id string) error {
		p := middleware.NewPipeline(ctx, &CompleteTransfer{TransferID: id})
		_, err := runner.Run(ctx, p, func(ctx context.Context, p *middleware.Pipeline) (any, error) {
			// While the handler runs, a second command on the same transfer
			// is halted.
			q := middleware.NewPipeline(ctx, &CompleteTransfer{TransferID: id})
			_, err := runner.Run(ctx, q, func(context.Context, *middleware.Pipeline) (any, error) { return nil, nil })
			fmt.Println("concurrent command:", err)
			return nil, nil
		})
		return err
	}
	fmt.Println("first command:", complete("t-1"))
	fmt.Println("after release:", complete("t-1"))
	// Output:
	// concurrent command: locked: transfer/t-1 is locked
	// first command: <nil>
	// concurrent command: locked: transfer/t-1 is locked
	// after release: <nil>
}
