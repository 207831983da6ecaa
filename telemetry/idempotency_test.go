package telemetry_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/codes"

	"github.com/claimbus/claimbus/bus"
	"github.com/claimbus/claimbus/claimstore"
	"github.com/claimbus/claimbus/idempotency"
	"github.com/claimbus/claimbus/internal/observe"
	"github.com/claimbus/claimbus/lockstore"
)

// The idempotency middleware's lock wait and outcome read is a step of
// the command: one span per command carrying a key, a child of the
// command's span, for the first run and for the repeat it answers.
func TestIdempotencySpan(t *testing.T) {
	t.Parallel()
	n := newNode(t)
	locks, err := lockstore.NewMemory(lockstore.MemoryConfig{})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, locks.Close()) })
	idem, err := idempotency.New(idempotency.Config{
		Locker: locks, Store: claimstore.NewMemory(claimstore.MemoryConfig{}), Retention: time.Hour,
		Key: idempotency.FromMetadata,
	})
	require.NoError(t, err)
	db := &users{emails: map[string]bool{}}
	b := startBus(t, bus.Config{OnSend: idempotency.OnSend, Middleware: middlewares(n.tel, idem)}, db)

	ctx := idempotency.WithKey(context.Background(), "k-1")
	for range 2 {
		id, err := bus.Dispatch[string](ctx, b, &CreateUser{ID: "u1", Email: "ada@example.com"})
		require.NoError(t, err)
		require.Equal(t, "u1", id)
	}
	_, err = bus.Dispatch[string](context.Background(), b, &CreateUser{ID: "u2", Email: "bob@example.com"})
	require.NoError(t, err)

	cmds := spansNamed(n.rec, "handle "+b.CommandName(&CreateUser{}))
	steps := spansNamed(n.rec, observe.StepIdempotency)
	require.Len(t, cmds, 3)
	require.Len(t, steps, 2, "one step per command with a key")
	for i, s := range steps {
		childOf(t, cmds[i].SpanContext(), s)
		require.Equal(t, codes.Unset, s.Status().Code)
	}
}
