package uniqueness_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/claimbus/claimbus/bus"
	"github.com/claimbus/claimbus/claimstore"
	"github.com/claimbus/claimbus/commands"
	"github.com/claimbus/claimbus/lockstore"
	"github.com/claimbus/claimbus/middleware"
	"github.com/claimbus/claimbus/uniqueness"
)

// flakyConfirm fails its first fails confirmations.
type flakyConfirm struct {
	claimstore.Reservations
	fails atomic.Int64
}

func (f *flakyConfirm) Confirm(ctx context.Context, k lockstore.Key, o string) error {
	if f.fails.Add(-1) >= 0 {
		return errors.New("transient")
	}
	return f.Reservations.Confirm(ctx, k, o)
}

// A handler calls Committed after its write, the confirmation fails (a
// transient store error), then the handler fails: its value stays taken,
// since its write committed.
func TestCommittedThenFailedKeepsTheValue(t *testing.T) {
	t.Parallel()
	table := newEventTable()
	store := &flakyConfirm{Reservations: claimstore.NewMemory(claimstore.MemoryConfig{})}
	store.fails.Store(1)
	mw := newUniqueness(t, uniqueness.Config{Locker: newMemory(t),
		Rules: []uniqueness.Rule{eventRule(table, store, time.Hour)}})
	b := startBus(t, mw, handler(func(ctx context.Context, c *commands.CreateStaff) (string, error) {
		if c.StaffID == "first" {
			table.appendEvent(c.StaffID, uniqueness.NormalizeEmail(c.Email))
			require.Error(t, uniqueness.Committed(ctx), "the first confirmation fails")
			return "", errors.New("publishing the event failed")
		}
		return eventHandler(table)(ctx, c)
	}))
	ctx := context.Background()
	_, err := bus.Dispatch[string](ctx, b, &commands.CreateStaff{StaffID: "first", Email: "ann@x.org", Name: "Ann"})
	require.Error(t, err)
	_, err = bus.Dispatch[string](ctx, b, &commands.CreateStaff{StaffID: "second", Email: "ann@x.org", Name: "Ann"})
	require.ErrorIs(t, err, middleware.ErrAlreadyTaken)
	require.NoError(t, mw.Flush(ctx))
	rs := reservationsIn(t, store)
	require.Len(t, rs, 1)
	require.True(t, rs[0].Confirmed, "confirmed after the handler, though it failed")
}

// A command succeeds and its reservation is confirmed while the read model
// lags; its redelivery (the same command id) fails in its handler: the
// confirmed reservation stays, and another command is still refused.
func TestFailedRedeliveryKeepsTheConfirmedReservation(t *testing.T) {
	t.Parallel()
	table := newEventTable()
	store := claimstore.NewMemory(claimstore.MemoryConfig{})
	mw := newUniqueness(t, uniqueness.Config{Locker: newMemory(t),
		Rules: []uniqueness.Rule{eventRule(table, store, time.Hour)}})
	ctx := context.Background()
	run := func(id, staff string, fail bool) error {
		cmd := &commands.CreateStaff{StaffID: staff, Email: "ann@x.org", Name: "N"}
		p := middleware.NewPipeline(ctx, cmd)
		p.CommandUUID = id
		r, rerr := middleware.NewRunner(middleware.RunnerConfig{Middleware: []middleware.Middleware{mw}})
		require.NoError(t, rerr)
		_, err := r.Run(ctx, p, func(ctx context.Context, p *middleware.Pipeline) (any, error) {
			if fail {
				return nil, errors.New("unique violation: already written")
			}
			table.appendEvent(staff, "ann@x.org")
			return nil, nil
		})
		require.NoError(t, mw.Flush(ctx))
		return err
	}
	require.NoError(t, run("cmd-1", "a", false))
	rs := reservationsIn(t, store)
	require.Len(t, rs, 1)
	require.True(t, rs[0].Confirmed)
	require.Error(t, run("cmd-1", "a", true)) // redelivery fails
	rs = reservationsIn(t, store)
	require.Len(t, rs, 1)
	require.True(t, rs[0].Confirmed, "the failed redelivery left it confirmed")
	err := run("cmd-2", "b", false)
	require.ErrorIs(t, err, middleware.ErrAlreadyTaken)
}

// The sweeper lists a pending reservation past maxLag, then a redelivery
// of its command runs, writes, and fails to confirm (the reservation is
// pending again, its age restarted) before the sweeper claims the value:
// the sweeper keeps it, and another command is still refused.
func TestSweepKeepsAReservationRestartedSinceItsList(t *testing.T) {
	t.Parallel()
	const maxLag = time.Minute
	clock := newFakeClock()
	table := newEventTable()
	mem := claimstore.NewMemory(claimstore.MemoryConfig{Now: clock.Now})
	store := &flakyConfirm{Reservations: mem}
	locks := newMemory(t)
	ctx := context.Background()
	// node 2: a normal node.
	mw2 := newUniqueness(t, uniqueness.Config{Locker: locks, Rules: []uniqueness.Rule{eventRule(table, store, maxLag)}})
	b2 := startBus(t, mw2, handler(eventHandler(table)))
	// node 1: the sweeper, whose lookup lets the redelivery run in the window.
	var fired atomic.Bool
	hooked := uniqueness.Field(uniqueness.Names{Field: "email", Scope: "staff.email"},
		func(c *commands.CreateStaff) string { return c.Email },
		func(ctx context.Context, email string) (bool, error) {
			shown, err := table.taken(ctx, email)
			if email == "dead@x.org" && fired.CompareAndSwap(false, true) {
				store.fails.Store(1) // the redelivery's confirmation fails (logged), stays pending
				p := middleware.NewPipeline(ctx, &commands.CreateStaff{StaffID: "dead", Email: "dead@x.org", Name: "N"})
				p.CommandUUID = "cmd-dead"
				r, _ := middleware.NewRunner(middleware.RunnerConfig{Middleware: []middleware.Middleware{mw2}})
				_, rerr := r.Run(ctx, p, func(ctx context.Context, p *middleware.Pipeline) (any, error) {
					table.appendEvent("dead", "dead@x.org")
					return "dead", nil
				})
				require.NoError(t, rerr)
				require.NoError(t, mw2.Flush(ctx))
			}
			return shown, err
		}, uniqueness.Normalize(uniqueness.NormalizeEmail), uniqueness.Reserve(store, maxLag))
	mw1 := newUniqueness(t, uniqueness.Config{Locker: locks, Rules: []uniqueness.Rule{hooked}})
	crashAfterClaim(t, mw2, &commands.CreateStaff{StaffID: "dead", Email: "dead@x.org", Name: "N"}, "cmd-dead")
	clock.advance(maxLag)
	res, err := mw1.Sweep(ctx)
	require.NoError(t, err)
	require.True(t, fired.Load(), "the redelivery ran between the list and the claim")
	require.Zero(t, res.Expired, "%+v", res)
	require.Len(t, reservationsIn(t, mem), 1)
	_, err = bus.Dispatch[string](ctx, b2, &commands.CreateStaff{StaffID: "other", Email: "dead@x.org", Name: "N"})
	require.ErrorIs(t, err, middleware.ErrAlreadyTaken)
}
