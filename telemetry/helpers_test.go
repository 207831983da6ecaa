package telemetry_test

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"
	"github.com/stretchr/testify/require"

	"github.com/claimbus/claimbus/bus"
	"github.com/claimbus/claimbus/lockstore"
	"github.com/claimbus/claimbus/middleware"
	"github.com/claimbus/claimbus/uniqueness"
)

// CreateUser is the command of the tests; its Email is unique.
type CreateUser struct {
	ID    string
	Email string
	// Fail makes the handler fail.
	Fail bool
}

// users stands in for a users table: the handler inserts, the lookup reads.
type users struct {
	mu     sync.Mutex
	emails map[string]bool
}

func (u *users) taken(_ context.Context, email string) (bool, error) {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.emails[email], nil
}

func (u *users) create(_ context.Context, c *CreateUser) (string, error) {
	if c.Fail {
		return "", errors.New("the users table is read-only today")
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	u.emails[c.Email] = true
	return c.ID, nil
}

// newUnique returns a uniqueness middleware on a memory store claiming
// CreateUser's email, and the store.
func newUnique(t testing.TB, db *users) (*uniqueness.Middleware, *lockstore.Memory) {
	t.Helper()
	store, err := lockstore.NewMemory(lockstore.MemoryConfig{})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, store.Close()) })
	unique, err := uniqueness.New(uniqueness.Config{
		Locker: store,
		Rules: []uniqueness.Rule{
			uniqueness.Field(uniqueness.Names{Field: "email", Scope: "user.email"}, func(c *CreateUser) string { return c.Email }, db.taken),
		},
	})
	require.NoError(t, err)
	return unique, store
}

// startBus starts a bus on cfg with the CreateUser handler of db, when db
// is not nil, and closes it at the end of the test.
func startBus(t *testing.T, cfg bus.Config, db *users) *bus.Bus {
	t.Helper()
	b, err := bus.New(cfg)
	require.NoError(t, err)
	if db != nil {
		require.NoError(t, bus.Handle(b, db.create))
	}
	require.NoError(t, b.Start(context.Background()))
	t.Cleanup(func() { require.NoError(t, b.Close()) })
	return b
}

// newGoChannel returns a GoChannel closed at the end of the test.
func newGoChannel(t testing.TB) *gochannel.GoChannel {
	ps := gochannel.NewGoChannel(gochannel.Config{}, watermill.NopLogger{})
	t.Cleanup(func() { require.NoError(t, ps.Close()) })
	return ps
}

// middlewares is a middleware list.
func middlewares(m ...middleware.Middleware) []middleware.Middleware { return m }
