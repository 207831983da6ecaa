package bustest_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/claimbus/claimbus/bus"
	"github.com/claimbus/claimbus/bus/bustest"
	"github.com/claimbus/claimbus/claimstore"
	"github.com/claimbus/claimbus/commands"
	"github.com/claimbus/claimbus/lockstore"
	"github.com/claimbus/claimbus/middleware"
	"github.com/claimbus/claimbus/uniqueness"
)

// staffBus is a test bus with a uniqueness rule on CreateStaff's email
// whose lookup never finds it (a read model that lags): only the
// reservation in the claim store keeps a value taken.
func staffBus(t testing.TB, created *atomic.Int32) *bustest.TestBus {
	return bustest.NewBus(t, bustest.Options{
		Middleware: func(s bustest.Stores) ([]middleware.Middleware, error) {
			unique, err := uniqueness.New(uniqueness.Config{Locker: s.Locks, Rules: []uniqueness.Rule{
				uniqueness.Field(uniqueness.Names{Field: "email", Scope: "staff.email"}, func(c *commands.CreateStaff) string { return c.Email },
					func(context.Context, string) (bool, error) { return false, nil },
					uniqueness.Reserve(s.Claims, time.Hour)),
			}})
			return []middleware.Middleware{unique}, err
		},
		Handlers: func(b *bus.Bus) error {
			return bus.Handle(b, func(_ context.Context, c *commands.CreateStaff) (string, error) {
				created.Add(1)
				return c.StaffID, nil
			})
		},
	})
}

// After Reset, a value taken before can be taken again, a lock held
// before is free (its holder sees it lost) and an outcome stored before is
// gone.
func TestResetFreesValuesLocksAndOutcomes(t *testing.T) {
	t.Parallel()
	var created atomic.Int32
	tb := staffBus(t, &created)
	ctx := context.Background()
	create := func(id string) error {
		_, err := bus.Dispatch[string](ctx, tb.Bus, &commands.CreateStaff{StaffID: id, Email: "ann@example.org", Name: "Ann"})
		return err
	}
	require.NoError(t, create("s-1"))
	bustest.RequireRejection(t, create("s-2"), middleware.CodeAlreadyTaken, "email")

	key := lockstore.Key{Namespace: "orders", ID: "42"}
	held, err := tb.Locks.TryLock(ctx, key)
	require.NoError(t, err)
	_, err = tb.Locks.TryLock(ctx, key)
	require.ErrorIs(t, err, lockstore.ErrLocked)
	outcome := lockstore.Key{Namespace: "idem", ID: "k"}
	require.NoError(t, tb.Claims.SaveOutcome(ctx, outcome, claimstore.Outcome{Result: []byte(`1`)}, time.Hour))

	require.NoError(t, tb.Reset(ctx))

	require.NoError(t, create("s-3"), "the value is free again")
	require.EqualValues(t, 2, created.Load())
	select {
	case <-held.Lost():
	default:
		t.Fatal("the lock held before Reset is not lost")
	}
	again, err := tb.Locks.TryLock(ctx, key)
	require.NoError(t, err, "the lock is free")
	require.NoError(t, again.Release(ctx))
	_, found, err := tb.Claims.Outcome(ctx, outcome)
	require.NoError(t, err)
	require.False(t, found, "the outcome is gone")

	// And the value is taken again after its new owner.
	bustest.RequireRejection(t, create("s-4"), middleware.CodeAlreadyTaken, "email")
}

// Reset refuses to run while a Dispatch waits.
func TestResetWhileDispatchWaits(t *testing.T) {
	t.Parallel()
	started, release := make(chan struct{}), make(chan struct{})
	tb := bustest.NewBus(t, bustest.Options{Handlers: func(b *bus.Bus) error {
		return bus.Handle(b, func(context.Context, *commands.CreateStaff) (string, error) {
			close(started)
			<-release
			return "", nil
		})
	}})
	done := make(chan error, 1)
	go func() {
		_, err := bus.Dispatch[string](context.Background(), tb.Bus, &commands.CreateStaff{})
		done <- err
	}()
	<-started
	require.ErrorContains(t, tb.Reset(context.Background()), "1 Dispatch calls wait")
	close(release)
	require.NoError(t, <-done)
	require.NoError(t, tb.Reset(context.Background()))
}

// The test bus closes itself when its test ends.
func TestNewBusClosesItself(t *testing.T) {
	t.Parallel()
	var tb *bustest.TestBus
	t.Run("inner", func(t *testing.T) {
		tb = bustest.NewBus(t, bustest.Options{Handlers: func(b *bus.Bus) error {
			return bus.Handle(b, func(_ context.Context, c *commands.CreateStaff) (string, error) { return c.StaffID, nil })
		}})
		got, err := bus.Dispatch[string](context.Background(), tb.Bus, &commands.CreateStaff{StaffID: "s-1"})
		require.NoError(t, err)
		require.Equal(t, "s-1", got)
	})
	_, err := bus.Dispatch[string](context.Background(), tb.Bus, &commands.CreateStaff{})
	require.ErrorIs(t, err, bus.ErrClosed)
	_, err = tb.Locks.TryLock(context.Background(), lockstore.Key{Namespace: "n", ID: "1"})
	require.ErrorIs(t, err, lockstore.ErrClosed)
}

// recordingTB records what a test would report; Fatalf records and
// returns, where testing.T would end the goroutine.
type recordingTB struct {
	testing.TB
	failures []string
}

func (r *recordingTB) Helper() {}

func (r *recordingTB) Fatalf(format string, args ...any) {
	r.failures = append(r.failures, fmt.Sprintf(format, args...))
}

func TestRequireRejection(t *testing.T) {
	t.Parallel()
	taken := middleware.Reject(middleware.CodeAlreadyTaken, "email", "email is already taken")
	tests := []struct {
		name        string
		err         error
		code, field string
		want        string // in the failure; "" for a pass
	}{
		{"match", taken, middleware.CodeAlreadyTaken, "email", ""},
		{"wrapped", fmt.Errorf("create staff: %w", taken), middleware.CodeAlreadyTaken, "email", ""},
		{"no field", middleware.Reject(middleware.CodeInvalid, "", "bad"), middleware.CodeInvalid, "", ""},
		{"nil", nil, middleware.CodeAlreadyTaken, "email", `want a rejection "already_taken" on field "email", got no error`},
		{"not a rejection", errors.New("boom"), middleware.CodeAlreadyTaken, "email", "got an error that is no rejection (*errors.errorString): boom"},
		{"remote error", &middleware.RemoteError{Message: "boom"}, middleware.CodeAlreadyTaken, "email", "no rejection (*middleware.RemoteError)"},
		{"other code", middleware.Reject(middleware.CodeLocked, "email", "locked"), middleware.CodeAlreadyTaken, "email", `got "locked" on field "email"`},
		{"other field", taken, middleware.CodeAlreadyTaken, "name", `want a rejection "already_taken" on field "name", got "already_taken" on field "email"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := &recordingTB{}
			bustest.RequireRejection(rec, tt.err, tt.code, tt.field)
			if tt.want == "" {
				require.Empty(t, rec.failures)
				return
			}
			require.Len(t, rec.failures, 1)
			require.Contains(t, rec.failures[0], tt.want)
		})
	}
}
