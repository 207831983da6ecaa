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

// TestBeforeUniqueness shows why the middleware goes before uniqueness: a
// repeat of a sign-up that succeeded gets the stored answer there, and
// already_taken (its own email, taken by its first run) after it.
func TestBeforeUniqueness(t *testing.T) {
	t.Parallel()
	for _, idemFirst := range []bool{true, false} {
		name := map[bool]string{true: "idempotency first", false: "uniqueness first"}[idemFirst]
		t.Run(name, func(t *testing.T) {
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
			mws := []middleware.Middleware{idem, unique}
			if !idemFirst {
				mws = []middleware.Middleware{unique, idem}
			}
			b, err := bus.New(bus.Config{Middleware: mws})
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
			if idemFirst {
				require.NoError(t, err)
				require.Equal(t, id, again)
			} else {
				require.ErrorIs(t, err, middleware.ErrAlreadyTaken, "the repeat was claimed before it was answered")
			}
		})
	}
}
