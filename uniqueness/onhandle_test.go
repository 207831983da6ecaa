package uniqueness_test

import (
	"context"
	"testing"

	"github.com/ThreeDotsLabs/watermill/components/cqrs"
	"github.com/stretchr/testify/require"

	"github.com/claimbus/claimbus/commands"
	"github.com/claimbus/claimbus/lockstore"
	"github.com/claimbus/claimbus/middleware"
	"github.com/claimbus/claimbus/uniqueness"
)

// staffBody is what an HTTP handler decodes, not the command the
// processor handles.
type staffBody struct{ Email string }

// A rule typed on another type than the processor's commands (the HTTP
// body instead of the command) would never act: OnHandle refuses it,
// naming the rule, and needs the processor's handlers to tell.
func TestOnHandleRefusesARuleNoHandlerHandles(t *testing.T) {
	t.Parallel()
	store, err := lockstore.NewMemory(lockstore.MemoryConfig{})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, store.Close()) })
	taken := func(context.Context, string) (bool, error) { return false, nil }
	names := uniqueness.Names{Field: "email", Scope: "staff.email"}
	runnerFor := func(rule uniqueness.Rule) *middleware.Runner {
		unique, err := uniqueness.New(uniqueness.Config{Locker: store, Rules: []uniqueness.Rule{rule}})
		require.NoError(t, err)
		r, err := middleware.NewRunner(middleware.RunnerConfig{Middleware: []middleware.Middleware{unique}})
		require.NoError(t, err)
		return r
	}
	handler := cqrs.NewCommandHandler("create_staff", func(context.Context, *commands.CreateStaff) error { return nil })
	handlers := []cqrs.CommandHandler{handler}

	wrong := runnerFor(uniqueness.Field(names, func(b *staffBody) string { return b.Email }, taken))
	_, err = middleware.OnHandle(middleware.HandlerConfig{Runner: wrong, Handlers: handlers})
	require.ErrorIs(t, err, middleware.ErrUnhandledCommandType)
	require.ErrorContains(t, err, "uniqueness_test.staffBody")

	_, err = middleware.OnHandle(middleware.HandlerConfig{Runner: wrong})
	require.ErrorContains(t, err, "Handlers is empty")

	right := runnerFor(uniqueness.Field(names, func(c *commands.CreateStaff) string { return c.Email }, taken))
	_, err = middleware.OnHandle(middleware.HandlerConfig{Runner: right, Handlers: handlers})
	require.NoError(t, err)
}
