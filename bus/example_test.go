package bus_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"

	"github.com/claimbus/claimbus/bus"
	"github.com/claimbus/claimbus/middleware"
)

type CreateStaff struct{ Email string }

type StaffID struct{ ID int }

// Dispatch a command and wait for its handler's result.
func ExampleDispatch() {
	b, err := bus.New(bus.Config{}) // in process
	if err != nil {
		panic(err)
	}
	_ = bus.Handle(b, func(ctx context.Context, c *CreateStaff) (StaffID, error) {
		return StaffID{ID: 42}, nil
	})
	if err := b.Start(context.Background()); err != nil {
		panic(err)
	}
	defer b.Close()

	id, err := bus.Dispatch[StaffID](context.Background(), b, &CreateStaff{Email: "ann@example.org"})
	fmt.Println(id.ID, err)
	// Output: 42 <nil>
}

// A middleware halts a command; the sender gets the rejection as data, over
// a GoChannel here as over any transport.
func ExampleDispatch_halted() {
	pubSub := gochannel.NewGoChannel(gochannel.Config{}, nil)
	defer pubSub.Close()

	emailTaken := middleware.Hooks{OnBeforeDispatch: func(ctx context.Context, p *middleware.Pipeline) {
		if c, ok := p.Command.(*CreateStaff); ok && c.Email == "ann@example.org" {
			p.Halt(middleware.Reject(middleware.CodeAlreadyTaken, "email", "%s is taken", c.Email))
		}
	}}
	b, err := bus.New(bus.Config{
		Publisher:  pubSub,
		Subscriber: pubSub,
		Middleware: []middleware.Middleware{emailTaken},
	})
	if err != nil {
		panic(err)
	}
	_ = bus.Handle(b, func(ctx context.Context, c *CreateStaff) (StaffID, error) {
		return StaffID{ID: 43}, nil
	})
	if err := b.Start(context.Background()); err != nil {
		panic(err)
	}
	defer b.Close()

	id, err := bus.Dispatch[StaffID](context.Background(), b, &CreateStaff{Email: "ann@example.org"})
	var rej *middleware.Rejection
	fmt.Println(id.ID, errors.Is(err, middleware.ErrAlreadyTaken), errors.As(err, &rej) && rej.Field == "email")
	fmt.Println(err)

	id, err = bus.Dispatch[StaffID](context.Background(), b, &CreateStaff{Email: "bob@example.org"})
	fmt.Println(id.ID, err)
	// Output:
	// 0 true true
	// already_taken: email: ann@example.org is taken
	// 43 <nil>
}
