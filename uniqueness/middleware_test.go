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

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/claimbus/claimbus/bus"
	"github.com/claimbus/claimbus/commands"
	"github.com/claimbus/claimbus/lockstore"
	"github.com/claimbus/claimbus/lockstore/lockstoretest"
	"github.com/claimbus/claimbus/middleware"
	"github.com/claimbus/claimbus/uniqueness"
)

func TestStormOnMemory(t *testing.T) {
	t.Parallel()
	stormOnStore(t, newMemory(t), newMemTable())
}

// gate is a handler's hold: the handler reports that it started, then
// waits until the test opens the gate.
type gate struct {
	started chan struct{}
	open    chan struct{}
}

func newGate() *gate { return &gate{started: make(chan struct{}), open: make(chan struct{})} }

func (g *gate) wait(ctx context.Context) error {
	close(g.started)
	select {
	case <-g.open:
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}

func requireClosed(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(waitFor):
		t.Fatalf("%s did not happen", what)
	}
}

// dispatchResult is the outcome of a Dispatch run in a goroutine.
type dispatchResult struct {
	id  string
	err error
}

func dispatchAsync(b *bus.Bus, cmd any) <-chan dispatchResult {
	ch := make(chan dispatchResult, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), waitFor)
		defer cancel()
		id, err := bus.Dispatch[string](ctx, b, cmd)
		ch <- dispatchResult{id, err}
	}()
	return ch
}

func receive(t *testing.T, ch <-chan dispatchResult) dispatchResult {
	t.Helper()
	select {
	case r := <-ch:
		return r
	case <-time.After(waitFor):
		t.Fatal("Dispatch did not return")
		return dispatchResult{}
	}
}

func annKey() lockstore.Key { return lockstore.Key{Namespace: "staff.email", ID: "ann@x.org"} }

// The first claimant's handler fails (or panics): the claim passes on and
// the next claimant, queued behind it, succeeds.
func TestFailedHandlerPassesTheClaimOn(t *testing.T) {
	t.Parallel()
	for _, mode := range []string{"error", "panic"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			store := newMemory(t)
			table := newMemTable()
			first := newGate()
			var runs atomic.Int64
			mw := newUniqueness(t, uniqueness.Config{Locker: store, Rules: []uniqueness.Rule{emailRule(table)}})
			b := startBus(t, mw, handler(func(ctx context.Context, c *commands.CreateStaff) (string, error) {
				runs.Add(1)
				if c.StaffID == "first" {
					if err := first.wait(ctx); err != nil {
						return "", err
					}
					if mode == "panic" {
						panic("handler exploded")
					}
					return "", errors.New("handler failed before writing")
				}
				return c.StaffID, table.insert(ctx, c.StaffID, uniqueness.NormalizeEmail(c.Email), c.Name)
			}))

			r1 := dispatchAsync(b, &commands.CreateStaff{StaffID: "first", Email: "ann@x.org", Name: "Ann"})
			requireClosed(t, first.started, "the first handler's start")
			r2 := dispatchAsync(b, &commands.CreateStaff{StaffID: "second", Email: "ANN@x.org", Name: "Ann"})
			require.Eventually(t, func() bool { return store.Waiting(annKey()) == 1 }, waitFor, time.Millisecond)
			close(first.open)

			got1 := receive(t, r1)
			require.Error(t, got1.err)
			require.NotErrorIs(t, got1.err, middleware.ErrAlreadyTaken)
			got2 := receive(t, r2)
			require.NoError(t, got2.err, "the claim must pass to the next claimant")
			require.Equal(t, "second", got2.id)
			require.EqualValues(t, 2, runs.Load())
			owner, err := table.owner(context.Background(), "ann@x.org")
			require.NoError(t, err)
			require.Equal(t, "second", owner)
			requireNothingHeld(t, store)
		})
	}
}

// A lookup error halts with unavailable and leaves nothing claimed, also
// when it strikes the second of two fields after the first was claimed.
func TestLookupErrorIsUnavailableAndReleasesEverything(t *testing.T) {
	t.Parallel()
	boom := errors.New("staff database unreachable")
	store := newMemory(t)
	accounts := newAccountTable()
	var runs atomic.Int64
	mw := newUniqueness(t, uniqueness.Config{Locker: store, Rules: []uniqueness.Rule{
		uniqueness.Field(uniqueness.Names{Field: "email", Scope: "account.email"}, func(c *createAccount) string { return c.Email },
			accounts.emailTaken, uniqueness.Normalize(uniqueness.NormalizeEmail)),
		uniqueness.Field(uniqueness.Names{Field: "username", Scope: "account.username"}, func(c *createAccount) string { return c.Username },
			func(context.Context, string) (bool, error) { return false, boom }),
	}})
	b := startBus(t, mw, handler(func(ctx context.Context, c *createAccount) (string, error) {
		runs.Add(1)
		return c.ID, nil
	}))

	_, err := bus.Dispatch[string](context.Background(), b, &createAccount{ID: "a-1", Email: "ann@x.org", Username: "ann"})
	require.ErrorIs(t, err, middleware.ErrUnavailable)
	require.NotErrorIs(t, err, middleware.ErrAlreadyTaken)
	var rej *middleware.Rejection
	require.ErrorAs(t, err, &rej)
	require.Equal(t, "username", rej.Field)
	require.Equal(t, "cannot check that username is unique now, try again", rej.Message)
	require.NotContains(t, err.Error(), "unreachable", "the lookup's error does not cross the wire")
	require.Zero(t, runs.Load())
	requireNothingHeld(t, store)
}

// The middleware's own halt, seen from a Runner: the lookup's error is
// wrapped beside the rejection.
func TestLookupErrorKeepsItsCause(t *testing.T) {
	t.Parallel()
	boom := errors.New("staff database unreachable")
	store := newMemory(t)
	mw := newUniqueness(t, uniqueness.Config{Locker: store, Rules: []uniqueness.Rule{
		uniqueness.Field(uniqueness.Names{Field: "email", Scope: "staff.email"}, func(c *commands.CreateStaff) string { return c.Email },
			func(context.Context, string) (bool, error) { return false, boom }),
	}})
	p := middleware.NewPipeline(context.Background(), &commands.CreateStaff{StaffID: "s", Email: "ann@x.org"})
	mw.BeforeDispatch(context.Background(), p)
	require.True(t, p.Halted())
	require.ErrorIs(t, p.Err(), middleware.ErrUnavailable)
	require.ErrorIs(t, p.Err(), boom)
	require.Empty(t, uniqueness.HeldClaims(p))
	mw.AfterFailure(context.Background(), p)
	requireNothingHeld(t, store)
}

// At-least-once delivery: a CreateStaff delivered again after its row
// committed is done, not already_taken, whether the copy arrives after the
// first run or while it runs.
func TestRedeliveredCommandIsDone(t *testing.T) {
	t.Parallel()
	store := newMemory(t)
	table := newMemTable()
	h := &staffHandler{table: table}
	mw := newUniqueness(t, uniqueness.Config{Locker: store, Rules: []uniqueness.Rule{emailRule(table)}})
	b := newBus(t, bus.Config{Middleware: []middleware.Middleware{mw}}, h)
	ctx := context.Background()
	cmd := &commands.CreateStaff{StaffID: "s-1", Email: "Ann@X.org", Name: "Ann"}

	id, err := bus.Dispatch[string](ctx, b, cmd)
	require.NoError(t, err)
	require.Equal(t, "s-1", id)
	_, err = bus.Dispatch[string](ctx, b, cmd)
	require.NoError(t, err, "a redelivery of a committed command is done")
	require.EqualValues(t, 1, h.runs.Load(), "the handler must not run again")

	_, err = bus.Dispatch[string](ctx, b, &commands.CreateStaff{StaffID: "s-2", Email: "ann@x.org", Name: "Ann"})
	require.ErrorIs(t, err, middleware.ErrAlreadyTaken, "another staff id is a duplicate")
	require.EqualValues(t, 1, h.runs.Load())
	requireNothingHeld(t, store)
}

func TestRedeliveryWhileTheFirstRunHoldsTheClaimIsDone(t *testing.T) {
	t.Parallel()
	store := newMemory(t)
	table := newMemTable()
	first := newGate()
	var runs atomic.Int64
	mw := newUniqueness(t, uniqueness.Config{Locker: store, Rules: []uniqueness.Rule{emailRule(table)}})
	b := startBus(t, mw, handler(func(ctx context.Context, c *commands.CreateStaff) (string, error) {
		if runs.Add(1) == 1 {
			if err := first.wait(ctx); err != nil {
				return "", err
			}
		}
		return c.StaffID, table.insert(ctx, c.StaffID, uniqueness.NormalizeEmail(c.Email), c.Name)
	}))

	cmd := &commands.CreateStaff{StaffID: "s-1", Email: "ann@x.org", Name: "Ann"}
	r1 := dispatchAsync(b, cmd)
	requireClosed(t, first.started, "the first run's start")
	r2 := dispatchAsync(b, cmd)
	require.Eventually(t, func() bool { return store.Waiting(annKey()) == 1 }, waitFor, time.Millisecond)
	close(first.open)
	require.NoError(t, receive(t, r1).err)
	require.NoError(t, receive(t, r2).err, "the copy waiting behind its own first run is done")
	require.EqualValues(t, 1, runs.Load())
	requireNothingHeld(t, store)
}

// createAccount and renameAccount have two unique fields each; their rules
// are listed in opposite orders, so only the store's key order keeps two of
// them from deadlocking.
type createAccount struct{ ID, Email, Username string }

type renameAccount struct{ ID, Username, Email string }

// accountTable holds accounts, unique by email and by username.
type accountTable struct {
	mu         sync.Mutex
	byEmail    map[string]string
	byUsername map[string]string
}

func newAccountTable() *accountTable {
	return &accountTable{byEmail: make(map[string]string), byUsername: make(map[string]string)}
}

func (a *accountTable) emailTaken(_ context.Context, email string) (bool, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	_, ok := a.byEmail[email]
	return ok, nil
}

func (a *accountTable) usernameTaken(_ context.Context, username string) (bool, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	_, ok := a.byUsername[username]
	return ok, nil
}

// insert writes both values at once, or neither when one is there.
func (a *accountTable) insert(id, email, username string) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	_, e := a.byEmail[email]
	_, u := a.byUsername[username]
	if e || u {
		return errDuplicate
	}
	a.byEmail[email], a.byUsername[username] = id, id
	return nil
}

func accountRules(a *accountTable) []uniqueness.Rule {
	norm := uniqueness.Normalize(uniqueness.NormalizeEmail)
	return []uniqueness.Rule{
		uniqueness.Field(uniqueness.Names{Field: "email", Scope: "account.email"}, func(c *createAccount) string { return c.Email }, a.emailTaken, norm),
		uniqueness.Field(uniqueness.Names{Field: "username", Scope: "account.username"}, func(c *createAccount) string { return c.Username }, a.usernameTaken),
		uniqueness.Field(uniqueness.Names{Field: "username", Scope: "account.username"}, func(c *renameAccount) string { return c.Username }, a.usernameTaken),
		uniqueness.Field(uniqueness.Names{Field: "email", Scope: "account.email"}, func(c *renameAccount) string { return c.Email }, a.emailTaken, norm),
	}
}

// Two unique fields under an overlapping storm: no deadlock, no duplicate,
// each rejection names a field whose value another command took, and
// every claim is released.
func TestTwoFieldsOverlappingStorm(t *testing.T) {
	t.Parallel()
	store := newMemory(t)
	accounts := newAccountTable()
	var duplicates atomic.Int64
	mw := newUniqueness(t, uniqueness.Config{Locker: store, Rules: accountRules(accounts)})
	write := func(id, email, username string) (string, error) {
		if err := accounts.insert(id, uniqueness.NormalizeEmail(email), username); err != nil {
			duplicates.Add(1)
			return "", err
		}
		return id, nil
	}
	b := startBus(t, mw, handler(func(ctx context.Context, c *createAccount) (string, error) {
		return write(c.ID, c.Email, c.Username)
	}), handler(func(ctx context.Context, c *renameAccount) (string, error) {
		return write(c.ID, c.Email, c.Username)
	}))

	const total, values = 200, 8
	type outcome struct {
		id, email, username string
		err                 error
	}
	outcomes := make([]outcome, total)
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range total {
		o := &outcomes[i]
		o.id = fmt.Sprintf("acct-%03d", i)
		o.email = fmt.Sprintf("user%d@x.org", i%values)
		o.username = fmt.Sprintf("name%d", (i*3+i/values)%values)
		var cmd any = &createAccount{ID: o.id, Email: mixedCase(o.email, i), Username: o.username}
		if i%2 == 1 {
			cmd = &renameAccount{ID: o.id, Email: mixedCase(o.email, i), Username: o.username}
		}
		wg.Go(func() {
			<-start
			_, o.err = bus.Dispatch[string](ctx, b, cmd)
		})
	}
	close(start)
	wg.Wait()
	require.NoError(t, ctx.Err(), "the storm did not finish: deadlock?")

	ok := 0
	for _, o := range outcomes {
		if o.err == nil {
			ok++
			require.Equal(t, o.id, accounts.byEmail[o.email])
			require.Equal(t, o.id, accounts.byUsername[o.username])
			continue
		}
		var rej *middleware.Rejection
		require.ErrorAs(t, o.err, &rej, "%s", o.id)
		require.ErrorIs(t, o.err, middleware.ErrAlreadyTaken, "%s", o.id)
		switch rej.Field {
		case "email":
			require.NotEmpty(t, accounts.byEmail[o.email])
			require.NotEqual(t, o.id, accounts.byEmail[o.email])
		case "username":
			require.NotEmpty(t, accounts.byUsername[o.username])
			require.NotEqual(t, o.id, accounts.byUsername[o.username])
		default:
			t.Fatalf("rejection names field %q", rej.Field)
		}
	}
	require.Positive(t, ok)
	require.Len(t, accounts.byEmail, ok)
	require.Zero(t, duplicates.Load(), "the unique index must never fire")
	requireNothingHeld(t, store)
}

// Rules naming one scope compete across command types.
func TestScopeIsSharedAcrossCommandTypes(t *testing.T) {
	t.Parallel()
	store := newMemory(t)
	table := newMemTable()
	type changeStaffEmail struct{ StaffID, Email string }
	mw := newUniqueness(t, uniqueness.Config{Locker: store, Rules: []uniqueness.Rule{
		emailRule(table),
		uniqueness.Field(uniqueness.Names{Field: "email", Scope: "staff.email"}, func(c *changeStaffEmail) string { return c.Email },
			table.taken, uniqueness.Normalize(uniqueness.NormalizeEmail)),
	}})
	h := &staffHandler{table: table}
	var changes atomic.Int64
	b := startBus(t, mw, handler(h.handle), handler(func(ctx context.Context, c *changeStaffEmail) (string, error) {
		changes.Add(1)
		return c.StaffID, nil
	}))
	ctx := context.Background()

	_, err := bus.Dispatch[string](ctx, b, &commands.CreateStaff{StaffID: "s-1", Email: "ann@x.org", Name: "Ann"})
	require.NoError(t, err)
	_, err = bus.Dispatch[string](ctx, b, &changeStaffEmail{StaffID: "s-2", Email: " ANN@x.org"})
	require.ErrorIs(t, err, middleware.ErrAlreadyTaken)
	_, err = bus.Dispatch[string](ctx, b, &changeStaffEmail{StaffID: "s-2", Email: "bob@x.org"})
	require.NoError(t, err)
	require.EqualValues(t, 1, changes.Load())
	requireNothingHeld(t, store)
}

// A claim waited for longer than ClaimTimeout halts with timeout; the
// holder keeps its claim.
func TestClaimTimeout(t *testing.T) {
	t.Parallel()
	store := newMemory(t)
	table := newMemTable()
	first := newGate()
	mw := newUniqueness(t, uniqueness.Config{
		Locker: store, Rules: []uniqueness.Rule{emailRule(table)}, ClaimTimeout: 50 * time.Millisecond,
	})
	b := startBus(t, mw, handler(func(ctx context.Context, c *commands.CreateStaff) (string, error) {
		if c.StaffID == "first" {
			if err := first.wait(ctx); err != nil {
				return "", err
			}
		}
		return c.StaffID, table.insert(ctx, c.StaffID, uniqueness.NormalizeEmail(c.Email), c.Name)
	}))

	r1 := dispatchAsync(b, &commands.CreateStaff{StaffID: "first", Email: "ann@x.org", Name: "Ann"})
	requireClosed(t, first.started, "the first handler's start")
	_, err := bus.Dispatch[string](context.Background(), b, &commands.CreateStaff{StaffID: "second", Email: "ann@x.org", Name: "Ann"})
	require.ErrorIs(t, err, middleware.ErrTimeout)
	var rej *middleware.Rejection
	require.ErrorAs(t, err, &rej)
	require.Equal(t, "email", rej.Field)
	require.Equal(t, "waited more than 50ms to claim email: another command holds it, try again", rej.Message)

	held, herr := store.Held(context.Background())
	require.NoError(t, herr)
	require.Len(t, held, 1, "the first command still holds its claim")
	close(first.open)
	require.NoError(t, receive(t, r1).err)
	requireNothingHeld(t, store)
}

// A claim lost while the handler runs cancels the handler's context.
func TestLostClaimCancelsTheHandler(t *testing.T) {
	t.Parallel()
	store := newMemory(t)
	table := newMemTable()
	g := newGate()
	causes := make(chan error, 1)
	mw := newUniqueness(t, uniqueness.Config{Locker: store, Rules: []uniqueness.Rule{emailRule(table)}})
	b := startBus(t, mw, handler(func(ctx context.Context, c *commands.CreateStaff) (string, error) {
		err := g.wait(ctx)
		causes <- err
		return "", err
	}))

	r := dispatchAsync(b, &commands.CreateStaff{StaffID: "s-1", Email: "ann@x.org", Name: "Ann"})
	requireClosed(t, g.started, "the handler's start")
	require.NoError(t, store.Reset(context.Background()))
	select {
	case cause := <-causes:
		require.ErrorIs(t, cause, lockstore.ErrLockLost)
		require.ErrorIs(t, cause, lockstore.ErrLockLost, "a lost claim is a lost lock")
	case <-time.After(waitFor):
		t.Fatal("the handler's context was not cancelled")
	}
	got := receive(t, r)
	require.Error(t, got.err)
	require.Contains(t, got.err.Error(), "claim lost")
	requireNothingHeld(t, store)
}

// The loss is seen where the store ends the lock, not an interval later:
// the memory store's Reset returns only once the handler's context is
// cancelled.
func TestLostClaimCancelsTheHandlerBeforeResetReturns(t *testing.T) {
	t.Parallel()
	store := newMemory(t)
	table := newMemTable()
	g := newGate()
	ctxs := make(chan context.Context, 1)
	mw := newUniqueness(t, uniqueness.Config{Locker: store, Rules: []uniqueness.Rule{emailRule(table)}})
	b := startBus(t, mw, handler(func(ctx context.Context, c *commands.CreateStaff) (string, error) {
		ctxs <- ctx
		close(g.started)
		<-g.open // not ctx: the test reads ctx itself
		return "", context.Cause(ctx)
	}))

	r := dispatchAsync(b, &commands.CreateStaff{StaffID: "s-1", Email: "ann@x.org", Name: "Ann"})
	requireClosed(t, g.started, "the handler's start")
	hctx := <-ctxs
	require.NoError(t, hctx.Err(), "the handler's context before the loss")
	require.NoError(t, store.Reset(context.Background()))
	require.ErrorIs(t, hctx.Err(), context.Canceled, "the handler's context is cancelled when Reset returns")
	require.ErrorIs(t, context.Cause(hctx), lockstore.ErrLockLost)
	close(g.open)
	got := receive(t, r)
	require.Error(t, got.err)
	require.Contains(t, got.err.Error(), "claim lost", "the handler's error crosses the bus as text")
	requireNothingHeld(t, store)
}

// releaseFailsLocker is a Locker whose locks fail to release with err,
// after releasing in the store under it.
type releaseFailsLocker struct {
	lockstore.Locker
	err error
}

func (l releaseFailsLocker) TryLock(ctx context.Context, key lockstore.Key) (lockstore.Lock, error) {
	return l.wrap(l.Locker.TryLock(ctx, key))
}

func (l releaseFailsLocker) Lock(ctx context.Context, key lockstore.Key) (lockstore.Lock, error) {
	return l.wrap(l.Locker.Lock(ctx, key))
}

func (l releaseFailsLocker) wrap(lk lockstore.Lock, err error) (lockstore.Lock, error) {
	if err != nil {
		return nil, err
	}
	return releaseFailsLock{lk, l.err}, nil
}

type releaseFailsLock struct {
	lockstore.Lock
	err error
}

func (l releaseFailsLock) Release(ctx context.Context) error {
	return errors.Join(l.Lock.Release(ctx), l.err)
}

// releaseReport is one call of a Config.OnReleaseError.
type releaseReport struct {
	commandID string
	key       lockstore.Key
	err       error
}

// A release that fails is never dropped: the after hook logs it with the
// command id and the key, at Error when the claim's lock was lost while
// the handler ran (its lease ran out), at Warn for any other failure, and
// OnReleaseError is told.
func TestReleaseErrorIsLoggedAndReported(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	// run runs a CreateStaff for ann@x.org whose claims are taken on
	// locker, with h as the handler, and returns the command's error, what
	// OnReleaseError was told and what was logged.
	run := func(t *testing.T, locker lockstore.Locker, h middleware.HandlerFunc) ([]releaseReport, []map[string]any, error) {
		t.Helper()
		logs := &logBuffer{}
		var reports []releaseReport
		mw := newUniqueness(t, uniqueness.Config{
			Locker: locker,
			Rules:  []uniqueness.Rule{emailRule(newMemTable())},
			Logger: slog.New(slog.NewJSONHandler(logs, nil)),
			OnReleaseError: func(_ context.Context, commandID string, key lockstore.Key, err error) {
				reports = append(reports, releaseReport{commandID, key, err})
			},
		})
		r, err := middleware.NewRunner(middleware.RunnerConfig{Middleware: []middleware.Middleware{mw}})
		require.NoError(t, err)
		p := middleware.NewPipeline(ctx, &commands.CreateStaff{StaffID: "s-1", Email: "Ann@x.org", Name: "Ann"})
		p.CommandUUID = "cmd-1"
		_, err = r.Run(ctx, p, h)
		return reports, logs.records(t), err
	}

	t.Run("lost", func(t *testing.T) {
		t.Parallel()
		clock := lockstoretest.NewClock(time.Unix(1_700_000_000, 0))
		store, err := lockstore.NewMemory(lockstore.MemoryConfig{TTL: time.Minute, Clock: clock})
		require.NoError(t, err)
		t.Cleanup(func() { require.NoError(t, store.Close()) })
		reports, recs, err := run(t, store, func(context.Context, *middleware.Pipeline) (any, error) {
			clock.Advance(time.Minute) // the claim's lease runs out while the handler runs
			return "s-1", nil
		})
		require.NoError(t, err, "the handler succeeded; the loss is reported, not returned")
		require.Len(t, reports, 1)
		require.Equal(t, "cmd-1", reports[0].commandID)
		require.Equal(t, annKey(), reports[0].key)
		require.ErrorIs(t, reports[0].err, lockstore.ErrLockLost)
		require.Len(t, recs, 1)
		require.Equal(t, "ERROR", recs[0]["level"])
		require.Equal(t, "claim lost while the command ran", recs[0]["msg"])
		require.Equal(t, "cmd-1", recs[0]["command_id"])
		require.Equal(t, "staff.email/ann@x.org", recs[0]["key"])
		require.Contains(t, recs[0]["error"], lockstore.ErrLockLost.Error())
		requireNothingHeld(t, store)
	})

	t.Run("other failure", func(t *testing.T) {
		t.Parallel()
		store := newMemory(t)
		unconfirmed := errors.New("unlock went unanswered")
		reports, recs, err := run(t, releaseFailsLocker{Locker: store, err: unconfirmed},
			func(context.Context, *middleware.Pipeline) (any, error) { return "s-1", nil })
		require.NoError(t, err)
		require.Len(t, reports, 1)
		require.Equal(t, "cmd-1", reports[0].commandID)
		require.Equal(t, annKey(), reports[0].key)
		require.ErrorIs(t, reports[0].err, unconfirmed)
		require.NotErrorIs(t, reports[0].err, lockstore.ErrLockLost)
		require.Len(t, recs, 1)
		require.Equal(t, "WARN", recs[0]["level"])
		require.Equal(t, "claim release failed", recs[0]["msg"])
		require.Equal(t, "cmd-1", recs[0]["command_id"])
		require.Equal(t, "staff.email/ann@x.org", recs[0]["key"])
		require.Contains(t, recs[0]["error"], "unlock went unanswered")
		requireNothingHeld(t, store)
	})
}

func TestCommandsWithoutUniqueValuesPassThrough(t *testing.T) {
	t.Parallel()
	store := newMemory(t)
	table := newMemTable()
	mw := newUniqueness(t, uniqueness.Config{Locker: store, Rules: []uniqueness.Rule{emailRule(table)}})
	ctx := context.Background()
	for _, cmd := range []any{
		&commands.GuessWord{LobbyID: "l-1", Word: "apple"},
		&commands.CreateStaff{StaffID: "s-1", Email: "   "},
	} {
		p := middleware.NewPipeline(ctx, cmd)
		mw.BeforeDispatch(ctx, p)
		require.False(t, p.Halted())
		require.Empty(t, uniqueness.HeldClaims(p))
		mw.AfterDispatch(ctx, p)
	}
	requireNothingHeld(t, store)
}

func TestValueTooLongToClaimIsInvalid(t *testing.T) {
	t.Parallel()
	store := newMemory(t)
	table := newMemTable()
	mw := newUniqueness(t, uniqueness.Config{Locker: store, Rules: []uniqueness.Rule{emailRule(table)}})
	ctx := context.Background()
	p := middleware.NewPipeline(ctx, &commands.CreateStaff{StaffID: "s-1", Email: strings.Repeat("a", lockstore.MaxIDLen) + "@x.org"})
	mw.BeforeDispatch(ctx, p)
	require.True(t, p.Halted())
	require.ErrorIs(t, p.Err(), middleware.ErrInvalid)
	var rej *middleware.Rejection
	require.ErrorAs(t, p.Err(), &rej)
	require.Equal(t, "email", rej.Field)
	mw.AfterFailure(ctx, p)
	requireNothingHeld(t, store)
}

// The claims are in the pipeline while the handler runs, and released by
// the after hooks.
func TestClaimsAreAssignedAndReleased(t *testing.T) {
	t.Parallel()
	store := newMemory(t)
	accounts := newAccountTable()
	mw := newUniqueness(t, uniqueness.Config{Locker: store, Rules: accountRules(accounts)})
	ctx := context.Background()
	p := middleware.NewPipeline(ctx, &renameAccount{ID: "a", Username: "ann", Email: "Ann@x.org"})
	mw.BeforeDispatch(ctx, p)
	require.False(t, p.Halted())
	claims := uniqueness.HeldClaims(p)
	require.Len(t, claims, 2)
	require.Equal(t, lockstore.Key{Namespace: "account.email", ID: "ann@x.org"}, claims[0].Key(), "taken in key order")
	require.Equal(t, lockstore.Key{Namespace: "account.username", ID: "ann"}, claims[1].Key())
	held, err := store.Held(ctx)
	require.NoError(t, err)
	require.Len(t, held, 2)
	require.NoError(t, p.Context().Err(), "the handler's context is live")

	mw.AfterDispatch(ctx, p)
	requireNothingHeld(t, store)
	require.Error(t, p.Context().Err(), "the handler's context ends with the run")
}

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	store := newMemory(t)
	table := newMemTable()
	good := emailRule(table)
	getEmail := func(c *commands.CreateStaff) string { return c.Email }
	tests := []struct {
		name string
		cfg  uniqueness.Config
		want []string
	}{
		{"valid", uniqueness.Config{Locker: store, Rules: []uniqueness.Rule{good}}, nil},
		{"everything wrong", uniqueness.Config{ClaimTimeout: -time.Second},
			[]string{"Locker is nil", "ClaimTimeout is negative", "Rules is empty"}},
		{"zero rule", uniqueness.Config{Locker: store, Rules: []uniqueness.Rule{{}}}, []string{"Rules[0] is a zero Rule"}},
		{"duplicate field", uniqueness.Config{Locker: store, Rules: []uniqueness.Rule{good, good}},
			[]string{`Rules[1]: a second rule for field "email"`}},
		{"bad rule", uniqueness.Config{Locker: store, Rules: []uniqueness.Rule{
			uniqueness.Field[*commands.CreateStaff](uniqueness.Names{Field: "", Scope: ""}, nil, nil, uniqueness.Normalize(nil),
				uniqueness.AlreadyDone(func(context.Context, *commands.GuessWord, string) (bool, error) { return false, nil })),
		}}, []string{"empty field name", "not a valid lock namespace", "nil value function", "nil lookup",
			"empty option", "AlreadyDone is for *commands.GuessWord"}},
		{"nil AlreadyDone", uniqueness.Config{Locker: store, Rules: []uniqueness.Rule{
			uniqueness.Field(uniqueness.Names{Field: "email", Scope: "staff.email"}, getEmail, table.taken,
				uniqueness.AlreadyDone[*commands.CreateStaff](nil)),
		}}, []string{"nil AlreadyDone function"}},
		{"value-type rule", uniqueness.Config{Locker: store, Rules: []uniqueness.Rule{
			uniqueness.Field(uniqueness.Names{Field: "email", Scope: "staff.email"}, func(c commands.CreateStaff) string { return c.Email }, table.taken),
		}}, nil},
		{"WriteBack", uniqueness.Config{Locker: store, Rules: []uniqueness.Rule{
			uniqueness.Field(uniqueness.Names{Field: "email", Scope: "staff.email"}, getEmail, table.taken,
				uniqueness.WriteBack(func(c *commands.CreateStaff, v string) { c.Email = v })),
		}}, nil},
		{"WriteBack of another type", uniqueness.Config{Locker: store, Rules: []uniqueness.Rule{
			uniqueness.Field(uniqueness.Names{Field: "email", Scope: "staff.email"}, getEmail, table.taken,
				uniqueness.WriteBack(func(*commands.GuessWord, string) {})),
		}}, []string{"WriteBack is for *commands.GuessWord, not *commands.CreateStaff"}},
		{"WriteBack on a value-type rule", uniqueness.Config{Locker: store, Rules: []uniqueness.Rule{
			uniqueness.Field(uniqueness.Names{Field: "email", Scope: "staff.email"}, func(c commands.CreateStaff) string { return c.Email }, table.taken,
				uniqueness.WriteBack(func(commands.CreateStaff, string) {})),
		}}, []string{"WriteBack needs a pointer command type (*commands.CreateStaff)"}},
		{"nil WriteBack", uniqueness.Config{Locker: store, Rules: []uniqueness.Rule{
			uniqueness.Field(uniqueness.Names{Field: "email", Scope: "staff.email"}, getEmail, table.taken,
				uniqueness.WriteBack[*commands.CreateStaff](nil)),
		}}, []string{"nil WriteBack function"}},
		{"FieldSQL without SQL or database", uniqueness.Config{Locker: store, Rules: []uniqueness.Rule{
			uniqueness.FieldSQL[*commands.CreateStaff, pgx.Rows](uniqueness.Names{Field: "email", Scope: "staff.email"}, getEmail, nil, ""),
		}}, []string{"nil database", "empty lookup SQL"}},
		{"TakenBy on a Field rule", uniqueness.Config{Locker: store, Rules: []uniqueness.Rule{
			uniqueness.Field(uniqueness.Names{Field: "email", Scope: "staff.email"}, getEmail, table.taken,
				uniqueness.TakenBy(func(c *commands.CreateStaff) string { return c.StaffID })),
		}}, []string{"TakenBy needs a FieldSQL rule"}},
		{"TakenBy and AlreadyDone, TakenBy of another type", uniqueness.Config{Locker: store, Rules: []uniqueness.Rule{
			uniqueness.FieldSQL[*commands.CreateStaff, pgx.Rows](uniqueness.Names{Field: "email", Scope: "staff.email"}, getEmail, (*pgxpool.Pool)(nil), "SELECT email, id FROM staff WHERE email = ANY($1)",
				uniqueness.TakenBy(func(c *commands.CreateStaff) string { return c.StaffID }),
				uniqueness.AlreadyDone(func(context.Context, *commands.CreateStaff, string) (bool, error) { return false, nil }),
				uniqueness.TakenBy(func(*commands.GuessWord) string { return "" }),
				uniqueness.TakenBy[*commands.CreateStaff](nil)),
		}}, []string{"both AlreadyDone and TakenBy", "TakenBy is for *commands.GuessWord", "nil TakenBy function"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := tt.cfg.Validate()
			_, nerr := uniqueness.New(tt.cfg)
			if tt.want == nil {
				require.NoError(t, err)
				require.NoError(t, nerr)
				return
			}
			require.Error(t, err)
			require.Error(t, nerr)
			for _, w := range tt.want {
				require.Contains(t, err.Error(), w)
			}
		})
	}
}

func TestNormalizeEmail(t *testing.T) {
	t.Parallel()
	require.Equal(t, "ann@x.org", uniqueness.NormalizeEmail("  Ann@X.ORG\t"))
	require.Equal(t, "zoë@x.org", uniqueness.NormalizeEmail("ZOË@x.org"))
	require.Empty(t, uniqueness.NormalizeEmail(" \n"))
}

func FuzzNormalizeEmail(f *testing.F) {
	for _, s := range []string{"ann@x.org", " Ann@X.ORG ", "İSTANBUL@X.ORG", "ẞ@x.org", "K@x.org", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n := uniqueness.NormalizeEmail(s)
		require.Equal(t, n, uniqueness.NormalizeEmail(n), "normalising is idempotent")
		require.Equal(t, strings.TrimSpace(n), n)
		if commands.CheckEmail("email", s) != nil {
			return
		}
		// A valid address stays a valid lock key.
		require.NoError(t, (lockstore.Key{Namespace: "staff.email", ID: n}).Validate())
		if isASCII(s) {
			// Two ASCII spellings of one address claim one value.
			require.Equal(t, n, uniqueness.NormalizeEmail(strings.ToUpper(s)))
			require.NoError(t, commands.CheckEmail("email", n), "the normalised address is still valid")
		}
	})
}

func isASCII(s string) bool {
	for i := range len(s) {
		if s[i] >= 0x80 {
			return false
		}
	}
	return true
}

// A timeout on the second field of a command releases the first.
func TestClaimTimeoutOnSecondFieldReleasesTheFirst(t *testing.T) {
	t.Parallel()
	store := newMemory(t)
	accounts := newAccountTable()
	first := newGate()
	mw := newUniqueness(t, uniqueness.Config{Locker: store, Rules: accountRules(accounts), ClaimTimeout: 50 * time.Millisecond})
	b := startBus(t, mw, handler(func(ctx context.Context, c *createAccount) (string, error) {
		if c.ID == "first" {
			if err := first.wait(ctx); err != nil {
				return "", err
			}
		}
		return c.ID, accounts.insert(c.ID, uniqueness.NormalizeEmail(c.Email), c.Username)
	}), handler(func(context.Context, *renameAccount) (string, error) {
		return "", errors.New("not sent") // accountRules have rules for it: the bus needs a handler
	}))

	r1 := dispatchAsync(b, &createAccount{ID: "first", Email: "ann@x.org", Username: "ann"})
	requireClosed(t, first.started, "the first handler's start")
	_, err := bus.Dispatch[string](context.Background(), b, &createAccount{ID: "second", Email: "bob@x.org", Username: "ann"})
	require.ErrorIs(t, err, middleware.ErrTimeout)
	var rej *middleware.Rejection
	require.ErrorAs(t, err, &rej)
	require.Equal(t, "username", rej.Field)
	held, err := store.Held(context.Background())
	require.NoError(t, err)
	require.Len(t, held, 2, "only the first command's two claims are held")
	for _, h := range held {
		require.NotEqual(t, "bob@x.org", h.Key.ID, "the second command's email claim was released")
	}
	close(first.open)
	require.NoError(t, receive(t, r1).err)
	requireNothingHeld(t, store)
}
