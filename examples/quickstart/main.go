// Command quickstart plugs the claimbus pipeline into a Watermill router:
// CreateStaff claims its email, so a duplicate is halted with already_taken.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log"
	"sync"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	wmiddleware "github.com/ThreeDotsLabs/watermill/message/router/middleware"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"

	"github.com/claimbus/claimbus/commands"
	"github.com/claimbus/claimbus/lockstore"
	"github.com/claimbus/claimbus/middleware"
	"github.com/claimbus/claimbus/uniqueness"
)

// staff stands in for your staff table: the handler writes it and the
// uniqueness lookup reads it.
type staff struct {
	mu     sync.Mutex
	emails map[string]bool
}

func (s *staff) taken(_ context.Context, email string) (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.emails[email], nil
}

func (s *staff) insert(email string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.emails[uniqueness.NormalizeEmail(email)] = true
}

func main() {
	if err := run(context.Background()); err != nil {
		log.Fatal(err)
	}
}

func run(ctx context.Context) error {
	logger := watermill.NopLogger{}
	pubSub := gochannel.NewGoChannel(gochannel.Config{}, logger)
	defer func() { _ = pubSub.Close() }()
	locks, err := lockstore.NewMemory(lockstore.MemoryConfig{}) // or lockstore/postgres for many nodes
	if err != nil {
		return err
	}
	defer func() { _ = locks.Close() }()
	db := &staff{emails: map[string]bool{}}

	// 1. The pipeline: validation, then a claim on CreateStaff's email.
	unique, err := uniqueness.New(uniqueness.Config{
		Locker: locks,
		Rules: []uniqueness.Rule{uniqueness.Field(uniqueness.Names{Field: "email", Scope: "staff.email"},
			func(c *commands.CreateStaff) string { return c.Email },
			db.taken, uniqueness.Normalize(uniqueness.NormalizeEmail))},
	})
	if err != nil {
		return err
	}
	runner, err := middleware.NewRunner(middleware.RunnerConfig{
		Middleware: []middleware.Middleware{middleware.Validate(), unique},
	})
	if err != nil {
		return err
	}
	registry := middleware.NewRegistry(nil) // cqrs.JSONMarshaler names and decodes
	if _, err := middleware.Register[commands.CreateStaff](registry); err != nil {
		return err
	}
	outcomes := make(chan error)
	pipeline, err := middleware.RouterMiddleware(middleware.RouterConfig{
		Runner:           runner,
		Registry:         registry,
		AckHandlerErrors: true,
		OnResult: func(_ context.Context, _ *message.Message, _ any, err error) error {
			outcomes <- err // where a service answers its sender
			return nil
		},
	})
	if err != nil {
		return err
	}

	// 2. Your router and your handler, unchanged but for one AddMiddleware.
	router, err := message.NewRouter(message.RouterConfig{}, logger)
	if err != nil {
		return err
	}
	router.AddMiddleware(wmiddleware.Recoverer, pipeline)
	router.AddConsumerHandler("create_staff", "staff", pubSub, func(msg *message.Message) error {
		var c commands.CreateStaff
		if err := json.Unmarshal(msg.Payload, &c); err != nil {
			return err
		}
		db.insert(c.Email) // commit here: the claim is released after the handler
		return nil
	})
	go func() { _ = router.Run(ctx) }()
	defer func() { _ = router.Close() }()
	<-router.Running()

	// 3. Send commands; a duplicate email, in any case, is already_taken.
	for _, c := range []commands.CreateStaff{
		{StaffID: "s-1", Email: "ann@example.org", Name: "Ann"},
		{StaffID: "s-2", Email: "ANN@example.org", Name: "Ann again"},
		{StaffID: "s-3", Email: "bob@example.org", Name: "Bob"},
	} {
		msg, err := registry.Marshaler().Marshal(&c)
		if err != nil {
			return err
		}
		if err := pubSub.Publish("staff", msg); err != nil {
			return err
		}
		err = <-outcomes
		var rej *middleware.Rejection
		switch {
		case errors.As(err, &rej):
			fmt.Printf("%s: %s (%s)\n", c.Email, rej.Code, rej.Field)
		case err != nil:
			return err
		default:
			fmt.Printf("%s: created\n", c.Email)
		}
	}
	return nil
}
