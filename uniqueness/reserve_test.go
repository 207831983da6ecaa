package uniqueness_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/claimbus/claimbus/bus"
	"github.com/claimbus/claimbus/claimstore"
	"github.com/claimbus/claimbus/commands"
	"github.com/claimbus/claimbus/internal/testlog"
	"github.com/claimbus/claimbus/lockstore"
	"github.com/claimbus/claimbus/middleware"
	"github.com/claimbus/claimbus/uniqueness"
)

// eventTable is an event-sourced staff model: the handler appends a
// StaffRegistered event, and the read model the lookup reads shows it only
// once project runs, as a lagging projection does. The read model's unique
// index is the backstop: project counts the events it refused.
type eventTable struct {
	mu       sync.Mutex
	events   []staffEvent
	applied  int
	read     map[string]string // email → staff id
	backstop int
	lookups  atomic.Int64
}

type staffEvent struct{ id, email string }

func newEventTable() *eventTable { return &eventTable{read: make(map[string]string)} }

// taken is the lookup: it reads the read model only.
func (e *eventTable) taken(_ context.Context, email string) (bool, error) {
	e.lookups.Add(1)
	e.mu.Lock()
	defer e.mu.Unlock()
	_, ok := e.read[email]
	return ok, nil
}

// appendEvent is the handler's write: it commits at once.
func (e *eventTable) appendEvent(id, email string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.events = append(e.events, staffEvent{id, email})
}

// project applies the events appended since the last call.
func (e *eventTable) project() {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, ev := range e.events[e.applied:] {
		if _, ok := e.read[ev.email]; ok {
			e.backstop++
			continue
		}
		e.read[ev.email] = ev.id
	}
	e.applied = len(e.events)
}

// registered counts the events appended for email.
func (e *eventTable) registered(email string) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	n := 0
	for _, ev := range e.events {
		if ev.email == email {
			n++
		}
	}
	return n
}

// eventRule is the email rule over an event table, reserving in store when
// store is not nil.
func eventRule(table *eventTable, store claimstore.Reservations, maxLag time.Duration) uniqueness.Rule {
	opts := []uniqueness.Option{uniqueness.Normalize(uniqueness.NormalizeEmail)}
	if store != nil {
		opts = append(opts, uniqueness.Reserve(store, maxLag))
	}
	return uniqueness.Field(uniqueness.Names{Field: "email", Scope: "staff.email"},
		func(c *commands.CreateStaff) string { return c.Email }, table.taken, opts...)
}

// eventHandler appends the StaffRegistered event of a CreateStaff.
func eventHandler(table *eventTable) func(context.Context, *commands.CreateStaff) (string, error) {
	return func(_ context.Context, c *commands.CreateStaff) (string, error) {
		table.appendEvent(c.StaffID, uniqueness.NormalizeEmail(c.Email))
		return c.StaffID, nil
	}
}

// fakeClock is a clock the test moves by hand.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func newFakeClock() *fakeClock { return &fakeClock{now: time.Unix(1_700_000_000, 0)} }

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// reservationsIn lists the reservations of scope staff.email.
func reservationsIn(t *testing.T, store claimstore.Reservations) []claimstore.Reservation {
	t.Helper()
	rs, err := store.List(context.Background(), "staff.email", "", 1000)
	require.NoError(t, err)
	return rs
}

// A storm over an event-sourced model whose projection does not run: with
// reservations, exactly one StaffRegistered per email; without them, the
// lookup never sees the first write and duplicates get through (so the
// test can fail).
func TestReservationsHoldWhileTheReadModelLags(t *testing.T) {
	t.Parallel()
	for _, reserve := range []bool{true, false} {
		t.Run(map[bool]string{true: "reservations", false: "none"}[reserve], func(t *testing.T) {
			t.Parallel()
			table := newEventTable()
			var store claimstore.Reservations
			if reserve {
				store = claimstore.NewMemory(claimstore.MemoryConfig{})
			}
			mw := newUniqueness(t, uniqueness.Config{Locker: newMemory(t),
				Rules: []uniqueness.Rule{eventRule(table, store, time.Hour)}})
			b := startBus(t, mw, handler(eventHandler(table)))
			res := storm(t, []*bus.Bus{b}, 200, 20)
			table.project()
			if !reserve {
				require.Positive(t, table.backstop, "without reservations a lagging read model lets duplicates through")
				return
			}
			require.EqualValues(t, 20, res.ok.Load())
			require.EqualValues(t, 180, res.taken.Load())
			require.Zero(t, table.backstop, "one StaffRegistered per email")
			require.Len(t, table.events, 20)
			require.NoError(t, mw.Flush(context.Background()))
			require.Len(t, reservationsIn(t, store), 20, "every value reserved until the read model shows it")
			for _, r := range reservationsIn(t, store) {
				require.True(t, r.Confirmed, "%v", r)
			}
		})
	}
}

// A handler that fails frees its value at once: its reservation is
// cancelled and the next claim succeeds. A handler that called Committed
// before failing keeps it.
func TestFailedHandlerFreesItsReservation(t *testing.T) {
	t.Parallel()
	for _, committed := range []bool{false, true} {
		t.Run(map[bool]string{false: "failed", true: "committed then failed"}[committed], func(t *testing.T) {
			t.Parallel()
			table := newEventTable()
			store := claimstore.NewMemory(claimstore.MemoryConfig{})
			mw := newUniqueness(t, uniqueness.Config{Locker: newMemory(t),
				Rules: []uniqueness.Rule{eventRule(table, store, time.Hour)}})
			b := startBus(t, mw, handler(func(ctx context.Context, c *commands.CreateStaff) (string, error) {
				if c.StaffID == "first" {
					if committed {
						table.appendEvent(c.StaffID, uniqueness.NormalizeEmail(c.Email))
						require.NoError(t, uniqueness.Committed(ctx))
					}
					return "", errors.New("publishing the event failed")
				}
				return eventHandler(table)(ctx, c)
			}))
			ctx := context.Background()
			_, err := bus.Dispatch[string](ctx, b, &commands.CreateStaff{StaffID: "first", Email: "ann@x.org", Name: "Ann"})
			require.Error(t, err)
			require.NotErrorIs(t, err, middleware.ErrAlreadyTaken)
			_, err = bus.Dispatch[string](ctx, b, &commands.CreateStaff{StaffID: "second", Email: "ANN@x.org", Name: "Ann"})
			if committed {
				require.ErrorIs(t, err, middleware.ErrAlreadyTaken, "a committed write keeps its value")
				require.Equal(t, 1, table.registered("ann@x.org"))
				return
			}
			require.NoError(t, err, "a failed handler frees the value at once")
			require.Equal(t, 1, table.registered("ann@x.org"))
			rs := reservationsIn(t, store)
			require.Len(t, rs, 1)
			require.Equal(t, "second", func() string {
				table.mu.Lock()
				defer table.mu.Unlock()
				return table.events[0].id
			}())
		})
	}
}

// crashAfterClaim runs the Uniqueness middleware's BeforeDispatch for cmd
// and then gives its claims' locks up without the after hooks: a node that
// died while its handler ran, after or before the handler's commit.
func crashAfterClaim(t *testing.T, mw *uniqueness.Middleware, cmd *commands.CreateStaff, id string) {
	t.Helper()
	p := middleware.NewPipeline(context.Background(), cmd)
	p.CommandUUID = id
	mw.BeforeDispatch(context.Background(), p)
	require.False(t, p.Halted(), "%v", p.Err())
	claims := uniqueness.HeldClaims(p)
	require.Len(t, claims, 1)
	require.NoError(t, claims[0].Release(context.Background()))
}

// A node dies between the handler's commit and the confirmation: its
// pending reservation keeps the value taken (no duplicate) until the
// lookup shows it, or until maxLag passes without the write appearing.
func TestOwnerGoneKeepsTheValueUntilMaxLag(t *testing.T) {
	t.Parallel()
	const maxLag = time.Minute
	for _, written := range []bool{false, true} {
		t.Run(map[bool]string{false: "write lost", true: "write committed"}[written], func(t *testing.T) {
			t.Parallel()
			clock := newFakeClock()
			table := newEventTable()
			store := claimstore.NewMemory(claimstore.MemoryConfig{Now: clock.Now})
			mw := newUniqueness(t, uniqueness.Config{Locker: newMemory(t),
				Rules: []uniqueness.Rule{eventRule(table, store, maxLag)}})
			b := startBus(t, mw, handler(eventHandler(table)))
			ctx := context.Background()

			crashAfterClaim(t, mw, &commands.CreateStaff{StaffID: "dead", Email: "ann@x.org", Name: "Ann"}, "cmd-dead")
			if written {
				table.appendEvent("dead", "ann@x.org")
			}
			rs := reservationsIn(t, store)
			require.Len(t, rs, 1)
			require.False(t, rs[0].Confirmed, "the dead node never confirmed")

			_, err := bus.Dispatch[string](ctx, b, &commands.CreateStaff{StaffID: "early", Email: "ann@x.org", Name: "Ann"})
			require.ErrorIs(t, err, middleware.ErrAlreadyTaken, "in doubt within maxLag: taken")

			clock.advance(maxLag)
			if written {
				table.project()
			}
			_, err = bus.Dispatch[string](ctx, b, &commands.CreateStaff{StaffID: "late", Email: "ann@x.org", Name: "Ann"})
			if written {
				require.ErrorIs(t, err, middleware.ErrAlreadyTaken, "the lookup shows the write: taken for good")
				require.Empty(t, reservationsIn(t, store), "and the reservation is dropped")
				require.Equal(t, 1, table.registered("ann@x.org"))
				return
			}
			require.NoError(t, err, "past maxLag with no write the value is free again")
			require.Equal(t, 1, table.registered("ann@x.org"))
		})
	}
}

// Claimants queued behind a holder that succeeds with a reserved value
// fail at once, without a lookup of their own: the reservation says the
// value is taken, though the read model does not show it.
func TestWaitersFailFastBehindAReservation(t *testing.T) {
	t.Parallel()
	table := newEventTable()
	store := claimstore.NewMemory(claimstore.MemoryConfig{})
	locks := newMemory(t)
	mw := newUniqueness(t, uniqueness.Config{Locker: locks, Rules: []uniqueness.Rule{eventRule(table, store, time.Hour)}})
	first := newGate()
	b := startBus(t, mw, handler(func(ctx context.Context, c *commands.CreateStaff) (string, error) {
		if c.StaffID == "first" {
			if err := first.wait(ctx); err != nil {
				return "", err
			}
		}
		return eventHandler(table)(ctx, c)
	}))
	r1 := dispatchAsync(b, &commands.CreateStaff{StaffID: "first", Email: "ann@x.org", Name: "Ann"})
	requireClosed(t, first.started, "the first handler's start")
	const waiters = 8
	var rs []<-chan dispatchResult
	for range waiters {
		rs = append(rs, dispatchAsync(b, &commands.CreateStaff{StaffID: "other", Email: "ann@x.org", Name: "Ann"}))
	}
	require.Eventually(t, func() bool { return locks.Waiting(annKey()) == waiters }, waitFor, time.Millisecond)
	require.EqualValues(t, 1, table.lookups.Load())
	close(first.open)
	require.NoError(t, receive(t, r1).err)
	for _, r := range rs {
		require.ErrorIs(t, receive(t, r).err, middleware.ErrAlreadyTaken)
	}
	require.EqualValues(t, 1, table.lookups.Load(), "the waiters failed on the reservation, with no lookup")
	require.Equal(t, 1, table.registered("ann@x.org"))
}

// The sweeper keeps the reservations still needed, drops those the read
// model shows, expires those in doubt past maxLag, and skips a scope that
// another sweeper holds.
func TestSweep(t *testing.T) {
	t.Parallel()
	const maxLag = time.Minute
	clock := newFakeClock()
	table := newEventTable()
	store := claimstore.NewMemory(claimstore.MemoryConfig{Now: clock.Now})
	locks := newMemory(t)
	mw := newUniqueness(t, uniqueness.Config{Locker: locks, Rules: []uniqueness.Rule{eventRule(table, store, maxLag)}})
	b := startBus(t, mw, handler(eventHandler(table)))
	ctx := context.Background()
	for _, e := range []string{"a@x.org", "b@x.org", "c@x.org"} {
		_, err := bus.Dispatch[string](ctx, b, &commands.CreateStaff{StaffID: e, Email: e, Name: "N"})
		require.NoError(t, err)
	}
	crashAfterClaim(t, mw, &commands.CreateStaff{StaffID: "dead", Email: "dead@x.org", Name: "N"}, "cmd-dead")
	require.NoError(t, mw.Flush(ctx))

	res, err := mw.Sweep(ctx)
	require.NoError(t, err)
	require.Equal(t, uniqueness.SweepResult{Kept: 4}, res, "nothing shown yet, nothing past maxLag")

	other, err := locks.TryLock(ctx, lockstore.Key{Namespace: "uniqueness.sweep", ID: "staff.email"})
	require.NoError(t, err)
	res, err = mw.Sweep(ctx)
	require.NoError(t, err)
	require.Equal(t, uniqueness.SweepResult{Skipped: []string{"staff.email"}}, res, "one sweeper at a time")
	require.NoError(t, other.Release(ctx))

	table.project()
	clock.advance(maxLag)
	res, err = mw.Sweep(ctx)
	require.NoError(t, err)
	require.Equal(t, uniqueness.SweepResult{Dropped: 3, Expired: 1}, res)
	require.Empty(t, reservationsIn(t, store), "the projection caught up: the table is empty")
	requireNothingHeld(t, locks)
}

// RunSweeper sweeps until its context ends, and refuses a bad interval.
func TestRunSweeper(t *testing.T) {
	t.Parallel()
	table := newEventTable()
	store := claimstore.NewMemory(claimstore.MemoryConfig{})
	mw := newUniqueness(t, uniqueness.Config{Locker: newMemory(t), Rules: []uniqueness.Rule{eventRule(table, store, time.Hour)}})
	b := startBus(t, mw, handler(eventHandler(table)))
	_, err := bus.Dispatch[string](context.Background(), b, &commands.CreateStaff{StaffID: "a", Email: "a@x.org", Name: "N"})
	require.NoError(t, err)
	table.project()
	require.Error(t, mw.RunSweeper(context.Background(), 0))

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mw.RunSweeper(ctx, time.Millisecond) }()
	require.Eventually(t, func() bool { return len(reservationsIn(t, store)) == 0 }, waitFor, time.Millisecond)
	cancel()
	require.NoError(t, <-done)
}

// Free frees a reserved value: the next claim of it succeeds though the
// read model never showed it.
func TestFreeFreesAReservedValue(t *testing.T) {
	t.Parallel()
	table := newEventTable()
	store := claimstore.NewMemory(claimstore.MemoryConfig{})
	locks := newMemory(t)
	mw := newUniqueness(t, uniqueness.Config{Locker: locks, Rules: []uniqueness.Rule{eventRule(table, store, time.Hour)}})
	b := startBus(t, mw, handler(eventHandler(table)))
	ctx := context.Background()
	_, err := bus.Dispatch[string](ctx, b, &commands.CreateStaff{StaffID: "a", Email: "ann@x.org", Name: "N"})
	require.NoError(t, err)
	_, err = bus.Dispatch[string](ctx, b, &commands.CreateStaff{StaffID: "b", Email: "ann@x.org", Name: "N"})
	require.ErrorIs(t, err, middleware.ErrAlreadyTaken)

	require.NoError(t, mw.Free(ctx, "staff.email", "  ANN@x.org"), "normalised as the rule does")
	_, err = bus.Dispatch[string](ctx, b, &commands.CreateStaff{StaffID: "c", Email: "ann@x.org", Name: "N"})
	require.NoError(t, err)
	require.ErrorIs(t, mw.Free(ctx, "other.scope", "x"), uniqueness.ErrNoReservations)
	requireNothingHeld(t, locks)
}

// A redelivered command (the same id) whose first run died before it
// confirmed runs again on its own reservation instead of being rejected.
func TestRedeliveryRunsOnItsOwnReservation(t *testing.T) {
	t.Parallel()
	table := newEventTable()
	store := claimstore.NewMemory(claimstore.MemoryConfig{})
	mw := newUniqueness(t, uniqueness.Config{Locker: newMemory(t), Rules: []uniqueness.Rule{eventRule(table, store, time.Hour)}})
	cmd := &commands.CreateStaff{StaffID: "a", Email: "ann@x.org", Name: "N"}
	crashAfterClaim(t, mw, cmd, "cmd-1")
	crashAfterClaim(t, mw, cmd, "cmd-1")

	p := middleware.NewPipeline(context.Background(), cmd)
	p.CommandUUID = "cmd-2"
	mw.BeforeDispatch(context.Background(), p)
	require.True(t, p.Halted())
	require.ErrorIs(t, p.Err(), middleware.ErrAlreadyTaken, "another command is still kept out")
}

// changeStaffEmail shares the scope staff.email with CreateStaff.
type changeStaffEmail struct{ StaffID, Email string }

func TestReserveValidate(t *testing.T) {
	t.Parallel()
	table := newEventTable()
	store := claimstore.NewMemory(claimstore.MemoryConfig{})
	other := claimstore.NewMemory(claimstore.MemoryConfig{})
	change := func(opts ...uniqueness.Option) uniqueness.Rule {
		return uniqueness.Field(uniqueness.Names{Field: "email", Scope: "staff.email"},
			func(c *changeStaffEmail) string { return c.Email }, table.taken, opts...)
	}
	locks := newMemory(t)
	for name, tc := range map[string]struct {
		rules []uniqueness.Rule
		want  string
	}{
		"nil store":         {[]uniqueness.Rule{eventRule(table, nil, 0), change(uniqueness.Reserve(nil, time.Second))}, "nil store"},
		"zero maxLag":       {[]uniqueness.Rule{eventRule(table, store, 0)}, "maxLag of 0s"},
		"scope half":        {[]uniqueness.Rule{eventRule(table, store, time.Hour), change()}, "some of its rules reserve"},
		"scope two stores":  {[]uniqueness.Rule{eventRule(table, store, time.Hour), change(uniqueness.Reserve(other, time.Hour))}, "different stores"},
		"scope two maxLags": {[]uniqueness.Rule{eventRule(table, store, time.Hour), change(uniqueness.Reserve(store, time.Minute))}, "different maxLags"},
	} {
		t.Run(name, func(t *testing.T) {
			err := uniqueness.Config{Locker: locks, Rules: tc.rules}.Validate()
			require.ErrorContains(t, err, tc.want)
		})
	}
	require.NoError(t, uniqueness.Config{Locker: locks, Rules: []uniqueness.Rule{
		eventRule(table, store, time.Hour), change(uniqueness.Reserve(store, time.Hour)),
	}}.Validate())
}

// slowConfirms is a reservation store whose Confirm waits for release, and
// then fails with err when err is set.
type slowConfirms struct {
	claimstore.Reservations
	release chan struct{}
	err     error
}

func (s *slowConfirms) Confirm(ctx context.Context, key lockstore.Key, owner string) error {
	<-s.release
	if s.err != nil {
		return s.err
	}
	return s.Reservations.Confirm(ctx, key, owner)
}

// AfterDispatch answers the sender without waiting for the confirmation:
// meanwhile the value is pending and owned, hence taken; Flush waits for
// the confirmation, and a failed one is logged at Error.
func TestConfirmationAfterTheAnswer(t *testing.T) {
	t.Parallel()
	for _, fail := range []bool{false, true} {
		t.Run(map[bool]string{false: "confirmed", true: "fails"}[fail], func(t *testing.T) {
			t.Parallel()
			table := newEventTable()
			store := &slowConfirms{Reservations: claimstore.NewMemory(claimstore.MemoryConfig{}), release: make(chan struct{})}
			if fail {
				store.err = errors.New("the store went away")
			}
			logs := &logBuffer{}
			mw := newUniqueness(t, uniqueness.Config{Locker: newMemory(t),
				Rules:  []uniqueness.Rule{eventRule(table, store, time.Hour)},
				Logger: slog.New(slog.NewJSONHandler(logs, nil))})
			b := startBus(t, mw, handler(eventHandler(table)))
			ctx := context.Background()
			_, err := mw.Sweep(ctx) // the sweeper's first sweep, as a node runs it
			require.NoError(t, err)

			_, err = bus.Dispatch[string](ctx, b, &commands.CreateStaff{StaffID: "first", Email: "ann@x.org", Name: "Ann"})
			require.NoError(t, err, "answered before the confirmation")
			rs := reservationsIn(t, store)
			require.Len(t, rs, 1)
			require.False(t, rs[0].Confirmed)
			_, err = bus.Dispatch[string](ctx, b, &commands.CreateStaff{StaffID: "second", Email: "ann@x.org", Name: "Ann"})
			require.ErrorIs(t, err, middleware.ErrAlreadyTaken, "pending, owned by a command that succeeded: taken")

			short, cancel := context.WithTimeout(ctx, 10*time.Millisecond)
			defer cancel()
			require.ErrorIs(t, mw.Flush(short), context.DeadlineExceeded, "the confirmation still runs")
			close(store.release)
			require.NoError(t, mw.Flush(ctx))
			rs = reservationsIn(t, store)
			require.Len(t, rs, 1)
			require.Equal(t, !fail, rs[0].Confirmed)
			recs := logs.records(t)
			if !fail {
				require.Empty(t, recs)
				return
			}
			require.Len(t, recs, 1)
			require.Equal(t, "ERROR", recs[0]["level"])
			require.Contains(t, recs[0]["msg"], "reservation not confirmed")
			require.Equal(t, "staff.email/ann@x.org", recs[0]["key"])
		})
	}
}

// Middleware.Stats counts the reservations of this process: pending while
// a command runs, then confirmed when it succeeded or cancelled when it
// failed.
func TestReservationStats(t *testing.T) {
	t.Parallel()
	table := newEventTable()
	mw := newUniqueness(t, uniqueness.Config{Locker: newMemory(t),
		Rules: []uniqueness.Rule{eventRule(table, claimstore.NewMemory(claimstore.MemoryConfig{}), time.Hour)}})
	gate := newGate()
	b := startBus(t, mw, handler(func(ctx context.Context, c *commands.CreateStaff) (string, error) {
		switch c.StaffID {
		case "slow":
			if err := gate.wait(ctx); err != nil {
				return "", err
			}
		case "fail":
			return "", errors.New("no")
		}
		return eventHandler(table)(ctx, c)
	}))
	slow := dispatchAsync(b, &commands.CreateStaff{StaffID: "slow", Email: "a@x.org", Name: "A"})
	requireClosed(t, gate.started, "the slow handler's start")
	require.Equal(t, int64(1), mw.Stats().ReservationsPending)
	close(gate.open)
	require.NoError(t, receive(t, slow).err)
	_, err := bus.Dispatch[string](context.Background(), b, &commands.CreateStaff{StaffID: "fail", Email: "b@x.org", Name: "B"})
	require.Error(t, err)
	require.NoError(t, mw.Flush(context.Background()))
	st := mw.Stats()
	require.Zero(t, st.ReservationsPending)
	require.Equal(t, int64(1), st.ReservationsConfirmed)
	require.Equal(t, int64(1), st.ReservationsCancelled)
}

// A rule that reserves needs a sweeper: without one, the first command
// logs one Warn saying so (however many follow); once a sweep has run
// (RunSweeper sweeps at once), nothing is logged.
func TestReserveWithoutASweeperIsLogged(t *testing.T) {
	t.Parallel()
	for _, sweeper := range []bool{false, true} {
		t.Run(fmt.Sprintf("sweeper=%v", sweeper), func(t *testing.T) {
			t.Parallel()
			var buf testlog.Buffer
			table := newEventTable()
			store := claimstore.NewMemory(claimstore.MemoryConfig{})
			mw := newUniqueness(t, uniqueness.Config{Locker: newMemory(t), Rules: []uniqueness.Rule{eventRule(table, store, time.Hour)},
				Logger: slog.New(slog.NewTextHandler(&buf, nil))})
			if sweeper {
				// A sweep before the first command, as RunSweeper's first.
				_, err := mw.Sweep(context.Background())
				require.NoError(t, err)
			}
			b := startBus(t, mw, handler(eventHandler(table)))
			for i := range 3 {
				_, err := bus.Dispatch[string](context.Background(), b, &commands.CreateStaff{StaffID: fmt.Sprint(i), Email: fmt.Sprintf("u%d@x.org", i), Name: "N"})
				require.NoError(t, err)
			}
			if sweeper {
				require.NotContains(t, buf.String(), "no sweeper runs")
			} else {
				require.Equal(t, 1, strings.Count(buf.String(), "no sweeper runs"), buf.String())
				require.Contains(t, buf.String(), "level=WARN")
			}
		})
	}
}
