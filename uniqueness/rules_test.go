package uniqueness_test

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/claimbus/claimbus/bus"
	"github.com/claimbus/claimbus/commands"
	"github.com/claimbus/claimbus/middleware"
	"github.com/claimbus/claimbus/uniqueness"
)

// A rule written for the command's struct type, not the pointer the
// pipeline carries, still claims: a duplicate is already_taken and its
// handler never runs.
func TestValueTypeRuleMatchesPointerCommands(t *testing.T) {
	t.Parallel()
	table := newMemTable()
	h := &staffHandler{table: table}
	rule := uniqueness.Field(uniqueness.Names{Field: "email", Scope: "staff.email"},
		func(c commands.CreateStaff) string { return c.Email },
		table.taken, uniqueness.Normalize(uniqueness.NormalizeEmail))
	mw := newUniqueness(t, uniqueness.Config{Locker: newMemory(t), Rules: []uniqueness.Rule{rule}})
	b := newBus(t, bus.Config{Middleware: []middleware.Middleware{mw}}, h)
	ctx := context.Background()

	_, err := bus.Dispatch[string](ctx, b, &commands.CreateStaff{StaffID: "s-1", Email: "ann@x.org", Name: "Ann"})
	require.NoError(t, err)
	_, err = bus.Dispatch[string](ctx, b, &commands.CreateStaff{StaffID: "s-2", Email: " ANN@x.org", Name: "Ann"})
	require.ErrorIs(t, err, middleware.ErrAlreadyTaken)
	require.EqualValues(t, 1, h.runs.Load(), "the duplicate's handler must not run")
	require.Zero(t, h.duplicates.Load(), "the claim, not the table, must stop the duplicate")
}

// A value-type rule matches a command given as a value too, and a nil
// pointer matches nothing.
func TestValueTypeRuleMatchesValuesAndSkipsNil(t *testing.T) {
	t.Parallel()
	store := newMemory(t)
	table := newMemTable()
	rule := uniqueness.Field(uniqueness.Names{Field: "email", Scope: "staff.email"},
		func(c commands.CreateStaff) string { return c.Email }, table.taken)
	mw := newUniqueness(t, uniqueness.Config{Locker: store, Rules: []uniqueness.Rule{rule}})
	ctx := context.Background()

	p := middleware.NewPipeline(ctx, commands.CreateStaff{StaffID: "s-1", Email: "ann@x.org"})
	mw.BeforeDispatch(ctx, p)
	require.False(t, p.Halted())
	require.Len(t, uniqueness.HeldClaims(p), 1)
	mw.AfterDispatch(ctx, p)

	p = middleware.NewPipeline(ctx, (*commands.CreateStaff)(nil))
	mw.BeforeDispatch(ctx, p)
	require.False(t, p.Halted())
	require.Empty(t, uniqueness.HeldClaims(p))
	requireNothingHeld(t, store)
}

// WriteBack puts the normalised value the rule claimed into the command
// the handler gets, and only for a command that goes on to its handler.
func TestWriteBackGivesTheHandlerTheClaimedValue(t *testing.T) {
	t.Parallel()
	table := newMemTable()
	var writes atomic.Int64
	rule := uniqueness.Field(uniqueness.Names{Field: "email", Scope: "staff.email"},
		func(c *commands.CreateStaff) string { return c.Email },
		table.taken,
		uniqueness.Normalize(uniqueness.NormalizeEmail),
		uniqueness.WriteBack(func(c *commands.CreateStaff, v string) {
			writes.Add(1)
			c.Email = v
		}))
	mw := newUniqueness(t, uniqueness.Config{Locker: newMemory(t), Rules: []uniqueness.Rule{rule}})
	b := startBus(t, mw, handler(func(ctx context.Context, c *commands.CreateStaff) (string, error) {
		// Stored as the command carries it: the lookup finds it only if it
		// is the normalised form.
		return c.Email, table.insert(ctx, c.StaffID, c.Email, c.Name)
	}))
	ctx := context.Background()

	got, err := bus.Dispatch[string](ctx, b, &commands.CreateStaff{StaffID: "s-1", Email: "  Ann@X.org ", Name: "Ann"})
	require.NoError(t, err)
	require.Equal(t, "ann@x.org", got, "the handler sees the claimed value")
	taken, err := table.taken(ctx, "ann@x.org")
	require.NoError(t, err)
	require.True(t, taken)

	_, err = bus.Dispatch[string](ctx, b, &commands.CreateStaff{StaffID: "s-2", Email: "ANN@x.org", Name: "Ann"})
	require.ErrorIs(t, err, middleware.ErrAlreadyTaken)
	require.EqualValues(t, 1, writes.Load(), "a halted command is not written back")
}

// A rule whose command type no handler takes fails the bus's Start; the
// same bus starts once the handler is registered.
func TestBusStartRefusesARuleWithoutAHandler(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name string
		rule uniqueness.Rule
		want string
	}{
		{"pointer rule", uniqueness.Field(uniqueness.Names{Field: "email", Scope: "staff.email"},
			func(c *commands.CreateStaff) string { return c.Email }, newMemTable().taken), "*commands.CreateStaff"},
		{"value rule", uniqueness.Field(uniqueness.Names{Field: "email", Scope: "staff.email"},
			func(c commands.CreateStaff) string { return c.Email }, newMemTable().taken), "commands.CreateStaff"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			mw := newUniqueness(t, uniqueness.Config{Locker: newMemory(t), Rules: []uniqueness.Rule{tt.rule}})
			b, err := bus.New(bus.Config{Middleware: []middleware.Middleware{mw}})
			require.NoError(t, err)
			t.Cleanup(func() { require.NoError(t, b.Close()) })
			require.NoError(t, bus.Handle(b, func(context.Context, *renameStaff) (string, error) { return "", nil }))

			err = b.Start(context.Background())
			require.ErrorIs(t, err, middleware.ErrUnhandledCommandType)
			require.Contains(t, err.Error(), `rule for field "email"`)
			require.Contains(t, err.Error(), "acts on "+tt.want+",")
			_, err = bus.Dispatch[string](context.Background(), b, &commands.CreateStaff{StaffID: "s-1", Email: "ann@x.org"})
			require.ErrorIs(t, err, bus.ErrNotStarted, "a failed Start starts nothing")

			require.NoError(t, bus.Handle(b, func(_ context.Context, c *commands.CreateStaff) (string, error) { return c.StaffID, nil }))
			require.NoError(t, b.Start(context.Background()))
			id, err := bus.Dispatch[string](context.Background(), b, &commands.CreateStaff{StaffID: "s-1", Email: "ann@x.org"})
			require.NoError(t, err)
			require.Equal(t, "s-1", id)
		})
	}
}

// RouterMiddleware refuses a Runner whose rule's command type its Registry
// does not hold, and accepts it once the type is registered.
func TestRouterMiddlewareRefusesARuleWithoutARegisteredType(t *testing.T) {
	t.Parallel()
	table := newMemTable()
	mw := newUniqueness(t, uniqueness.Config{Locker: newMemory(t), Rules: []uniqueness.Rule{
		uniqueness.Field(uniqueness.Names{Field: "email", Scope: "staff.email"}, func(c commands.CreateStaff) string { return c.Email }, table.taken),
		uniqueness.Field(uniqueness.Names{Field: "email", Scope: "staff.email"}, func(c *renameStaff) string { return c.Email }, table.taken),
	}})
	runner, err := middleware.NewRunner(middleware.RunnerConfig{Middleware: []middleware.Middleware{mw}})
	require.NoError(t, err)
	registry := middleware.NewRegistry(nil)
	_, err = middleware.Register[renameStaff](registry)
	require.NoError(t, err)

	_, err = middleware.RouterMiddleware(middleware.RouterConfig{Runner: runner, Registry: registry})
	require.ErrorIs(t, err, middleware.ErrUnhandledCommandType)
	require.Contains(t, err.Error(), "commands.CreateStaff")
	require.NotContains(t, err.Error(), "renameStaff", "a registered type is not reported")

	_, err = middleware.Register[commands.CreateStaff](registry)
	require.NoError(t, err)
	_, err = middleware.RouterMiddleware(middleware.RouterConfig{Runner: runner, Registry: registry})
	require.NoError(t, err)
}

// renameStaff is a second command type with an email, for the tests of
// command type checks.
type renameStaff struct{ StaffID, Email string }
