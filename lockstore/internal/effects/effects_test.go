package effects_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/claimbus/claimbus/lockstore"
	"github.com/claimbus/claimbus/lockstore/internal/effects"
)

func TestNest(t *testing.T) {
	t.Parallel()
	var order []string
	record := func(s string) func() { return func() { order = append(order, s) } }

	t.Run("merged scopes run with the outermost, in order; dropped ones never", func(t *testing.T) {
		order = nil
		ctx, root := effects.New(context.Background())
		lockstore.AfterCommit(ctx, record("outer 1"))

		kept, child := effects.Nest(ctx)
		lockstore.AfterCommit(kept, record("kept"))
		deep, grandchild := effects.Nest(kept)
		lockstore.AfterCommit(deep, record("deep, dropped"))
		_ = grandchild // rolled back to its savepoint: dropped
		deep2, grandchild2 := effects.Nest(kept)
		lockstore.AfterCommit(deep2, record("deep, kept"))
		grandchild2.Merge()
		child.Merge()

		dropped, _ := effects.Nest(ctx)
		lockstore.AfterCommit(dropped, record("dropped"))
		lockstore.AfterCommit(ctx, record("outer 2"))

		require.Empty(t, order, "nothing runs before the outermost commit")
		root.Run()
		require.Equal(t, []string{"outer 1", "kept", "deep, kept", "outer 2"}, order)
	})

	t.Run("registrations after the merge, from an effect, still run", func(t *testing.T) {
		order = nil
		ctx, root := effects.New(context.Background())
		inner, child := effects.Nest(ctx)
		lockstore.AfterCommit(inner, func() {
			order = append(order, "effect")
			lockstore.AfterCommit(inner, record("registered by the effect"))
		})
		child.Merge()
		root.Run()
		require.Equal(t, []string{"effect", "registered by the effect"}, order)
	})

	t.Run("without an enclosing scope, Merge runs at once", func(t *testing.T) {
		order = nil
		inner, child := effects.Nest(context.Background())
		lockstore.AfterCommit(inner, record("nested"))
		require.Empty(t, order)
		child.Merge()
		require.Equal(t, []string{"nested"}, order)
		lockstore.AfterCommit(inner, record("after"))
		require.Equal(t, []string{"nested", "after"}, order)
	})
}

func TestTokenFrom(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, ok := lockstore.TokenFrom(ctx)
	require.False(t, ok)
	outer := effects.WithToken(ctx, 7)
	inner := effects.WithToken(outer, 9)
	got, ok := lockstore.TokenFrom(inner)
	require.True(t, ok)
	require.Equal(t, int64(9), got, "the innermost lock's token")
	got, ok = lockstore.TokenFrom(outer)
	require.True(t, ok)
	require.Equal(t, int64(7), got)
}
