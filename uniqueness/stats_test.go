package uniqueness

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/claimbus/claimbus/lockstore"
)

// TestClaimerStats follows the Claimer's counts through a claim, a
// claimant waiting behind it and the releases.
func TestClaimerStats(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	_, c, _ := newClaimer(t, lockstore.MemoryConfig{})
	require.Equal(t, Stats{}, c.Stats())

	first, err := c.Claim(ctx, key("ann@x.org"), notTaken)
	require.NoError(t, err)
	require.Equal(t, Stats{Held: 1}, c.Stats())
	second := startClaim(ctx, c, key("ann@x.org"), notTaken)
	requireWaiting(t, c, key("ann@x.org"), 1)
	require.Equal(t, Stats{Held: 1, Waiting: 1}, c.Stats())

	require.NoError(t, first.Release(ctx))
	r := receive(t, second)
	require.NoError(t, r.err)
	require.Equal(t, Stats{Held: 1}, c.Stats(), "the second claimant holds it now")
	require.NoError(t, r.claim.Release(ctx))
	require.Equal(t, Stats{}, c.Stats())
}
