package idempotency_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/claimbus/claimbus/bus"
	"github.com/claimbus/claimbus/idempotency"
	"github.com/claimbus/claimbus/middleware"
	"github.com/claimbus/claimbus/uniqueness"
)

// Register is a command with a unique field and a client's request id.
type Register struct {
	RequestID string
	Email     string
}

// TestBeforeUniqueness: the middleware goes before uniqueness, where a
// repeat of a sign-up that succeeded gets the stored answer; after it, the
// repeat would be refused already_taken by its own first run's email, so
// that order is refused when the pipeline is built, by the bus and by a
// Runner, naming the fix.
func TestBeforeUniqueness(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	var mu sync.Mutex
	emails := map[string]bool{}
	taken := func(_ context.Context, email string) (bool, error) {
		mu.Lock()
		defer mu.Unlock()
		return emails[email], nil
	}
	unique, err := uniqueness.New(uniqueness.Config{Locker: e.locker, Rules: []uniqueness.Rule{
		uniqueness.Field(uniqueness.Names{Field: "email", Scope: "user.email"}, func(c *Register) string { return c.Email }, taken),
	}})
	require.NoError(t, err)
	idem := e.middleware(idempotency.Config{Locker: e.locker, Store: e.store, Retention: time.Hour,
		Key: func(p *middleware.Pipeline) string { return p.Command.(*Register).RequestID }})

	_, err = bus.New(bus.Config{Middleware: []middleware.Middleware{unique, idem}})
	require.ErrorContains(t, err, "put it before")
	_, err = middleware.NewRunner(middleware.RunnerConfig{Middleware: []middleware.Middleware{middleware.Validate(), unique, idem}})
	require.ErrorContains(t, err, "Middleware[2] (*idempotency.Middleware) answers repeats from a store but comes after Middleware[1] (*uniqueness.Middleware)")

	b, err := bus.New(bus.Config{Middleware: []middleware.Middleware{idem, unique}})
	require.NoError(t, err)
	require.NoError(t, bus.Handle(b, func(_ context.Context, c *Register) (string, error) {
		mu.Lock()
		defer mu.Unlock()
		emails[c.Email] = true
		return "user-1", nil
	}))
	require.NoError(t, b.Start(context.Background()))
	t.Cleanup(func() { require.NoError(t, b.Close()) })

	ctx := context.Background()
	id, err := bus.Dispatch[string](ctx, b, &Register{RequestID: "r1", Email: "ann@x.org"})
	require.NoError(t, err)
	require.Equal(t, "user-1", id)
	again, err := bus.Dispatch[string](ctx, b, &Register{RequestID: "r1", Email: "ann@x.org"})
	require.NoError(t, err)
	require.Equal(t, id, again)
}
