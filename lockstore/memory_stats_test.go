package lockstore_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/claimbus/claimbus/lockstore"
)

// TestMemoryStats follows the store's counts through grants, a waiter, a
// release and a Reset.
func TestMemoryStats(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	m := newMemory(t, lockstore.MemoryConfig{})
	var _ lockstore.StatsReporter = m
	require.Equal(t, lockstore.Stats{}, m.Stats())

	a, err := m.TryLock(ctx, key("a"))
	require.NoError(t, err)
	_, err = m.TryLock(ctx, key("b"))
	require.NoError(t, err)
	waiter := goLock(ctx, m, key("b"))
	waitQueued(t, m, key("b"), 1)
	require.Equal(t, lockstore.Stats{Held: 2, Waiting: 1}, m.Stats())

	require.NoError(t, a.Release(ctx))
	require.Equal(t, lockstore.Stats{Held: 1, Waiting: 1}, m.Stats(), "a release is not a loss")

	require.NoError(t, m.Reset(ctx))
	r := await(t, waiter, "waiter after Reset")
	require.NoError(t, r.err)
	require.Equal(t, lockstore.Stats{Held: 1, LocksLost: 1}, m.Stats(), "Reset ended b; its waiter holds it now")
	require.NoError(t, r.lock.Release(ctx))
	require.Equal(t, lockstore.Stats{LocksLost: 1}, m.Stats())

	// A lock nobody waited for, watched or leased counts when Reset or
	// Close ends it too.
	_, err = m.TryLock(ctx, key("c"))
	require.NoError(t, err)
	require.NoError(t, m.Reset(ctx))
	require.Equal(t, lockstore.Stats{LocksLost: 2}, m.Stats(), "Reset ended c")
	_, err = m.TryLock(ctx, key("d"))
	require.NoError(t, err)
	require.NoError(t, m.Close())
	require.Equal(t, lockstore.Stats{LocksLost: 3}, m.Stats(), "Close ended d")
}
