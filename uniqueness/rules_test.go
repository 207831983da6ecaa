package uniqueness_test

import (
	"context"
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
	rule := uniqueness.Field("email", "staff.email",
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
	rule := uniqueness.Field("email", "staff.email",
		func(c commands.CreateStaff) string { return c.Email }, table.taken)
	mw := newUniqueness(t, uniqueness.Config{Locker: store, Rules: []uniqueness.Rule{rule}})
	ctx := context.Background()

	p := middleware.NewPipeline(ctx, commands.CreateStaff{StaffID: "s-1", Email: "ann@x.org"})
	mw.BeforeDispatch(ctx, p)
	require.False(t, p.Halted())
	require.Len(t, uniqueness.ClaimsOf(p), 1)
	mw.AfterDispatch(ctx, p)

	p = middleware.NewPipeline(ctx, (*commands.CreateStaff)(nil))
	mw.BeforeDispatch(ctx, p)
	require.False(t, p.Halted())
	require.Empty(t, uniqueness.ClaimsOf(p))
	requireNothingHeld(t, store)
}
