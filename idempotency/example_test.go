package idempotency_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/claimbus/claimbus/bus"
	"github.com/claimbus/claimbus/claimstore"
	"github.com/claimbus/claimbus/idempotency"
	"github.com/claimbus/claimbus/lockstore"
	"github.com/claimbus/claimbus/middleware"
)

// Charge is a command a client may send twice: RequestID is its
// idempotency key.
type Charge struct {
	RequestID string
	Cents     int
}

// A repeated command gets the first run's answer; the handler runs once.
// A repeat with another payload is an idempotency_conflict.
func Example() {
	locks, err := lockstore.NewMemory(lockstore.MemoryConfig{})
	if err != nil {
		panic(err)
	}
	defer locks.Close()
	idem, err := idempotency.New(idempotency.Config{
		Locker:    locks,
		Store:     claimstore.NewMemory(claimstore.MemoryConfig{}),
		Retention: 24 * time.Hour,
		Key: func(p *middleware.Pipeline) string {
			if c, ok := p.Command.(*Charge); ok {
				return c.RequestID
			}
			return ""
		},
	})
	if err != nil {
		panic(err)
	}
	b, err := bus.New(bus.Config{Middleware: []middleware.Middleware{idem}})
	if err != nil {
		panic(err)
	}
	runs := 0
	_ = bus.Handle(b, func(ctx context.Context, c *Charge) (string, error) {
		runs++
		return fmt.Sprintf("charged %d cents (run %d)", c.Cents, runs), nil
	})
	if err := b.Start(context.Background()); err != nil {
		panic(err)
	}
	defer b.Close()

	ctx := context.Background()
	for _, c := range []*Charge{{"req-1", 500}, {"req-1", 500}, {"req-1", 700}} {
		res, err := bus.Dispatch[string](ctx, b, c)
		fmt.Printf("%q %v %v\n", res, err, errors.Is(err, middleware.ErrIdempotencyConflict))
	}
	fmt.Println("runs:", runs)
	// Output:
	// "charged 500 cents (run 1)" <nil> false
	// "charged 500 cents (run 1)" <nil> false
	// "" idempotency_conflict: the idempotency key was used by a command with another payload true
	// runs: 1
}
