// Command quickstart runs the claimbus pipeline on a bus: CreateStaff claims
// its email, so a duplicate is halted with already_taken.
package main

import (
	"context"
	"errors"
	"fmt"
	"log"
	"sync"

	"github.com/claimbus/claimbus/bus"
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
	locks, err := lockstore.NewMemory(lockstore.MemoryConfig{}) // or lockstore/postgres for many nodes
	if err != nil {
		return err
	}
	defer func() { _ = locks.Close() }()
	db := &staff{emails: map[string]bool{}}

	// The pipeline: validation, then a claim on CreateStaff's email, looked
	// up where the handler writes.
	unique, err := uniqueness.New(uniqueness.Config{
		Locker: locks,
		Rules: []uniqueness.Rule{uniqueness.Field(uniqueness.Names{Field: "email", Scope: "staff.email"},
			func(c *commands.CreateStaff) string { return c.Email },
			db.taken, uniqueness.Normalize(uniqueness.NormalizeEmail))},
	})
	if err != nil {
		return err
	}
	b, err := bus.New(bus.Config{Middleware: []middleware.Middleware{middleware.Validate(), unique}})
	if err != nil {
		return err
	}
	err = bus.Handle(b, func(ctx context.Context, c *commands.CreateStaff) (string, error) {
		db.insert(c.Email) // commit here: the claim is released after the handler
		return c.StaffID, nil
	})
	if err != nil {
		return err
	}
	if err := b.Start(ctx); err != nil {
		return err
	}
	defer func() { _ = b.Close() }()

	// Dispatch waits for the outcome; a duplicate email, in any case, is already_taken.
	for _, c := range []commands.CreateStaff{
		{StaffID: "s-1", Email: "ann@example.org", Name: "Ann"},
		{StaffID: "s-2", Email: "ANN@example.org", Name: "Ann again"},
		{StaffID: "s-3", Email: "bob@example.org", Name: "Bob"},
	} {
		_, err := bus.Dispatch[string](ctx, b, &c)
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
