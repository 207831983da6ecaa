package storm

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/claimbus/claimbus/commands"
	"github.com/claimbus/claimbus/uniqueness"
)

// A plan sends every address at least once, in spellings that normalise
// to it, to the targets in turn; the seed fixes the addresses, spellings
// and order, never the staff ids.
func TestPlan(t *testing.T) {
	t.Parallel()
	p := newPlan(42, 1000, 100, 3)
	require.Equal(t, int64(42), p.seed)
	require.Len(t, p.emails, 100)
	seen := map[int]int{}
	ids := map[string]bool{}
	mixed := 0
	for i, s := range p.sends {
		seen[s.email]++
		require.Equal(t, p.emails[s.email], uniqueness.NormalizeEmail(s.spelling))
		if s.spelling != p.emails[s.email] {
			mixed++
		}
		require.Equal(t, i%3, s.target)
		require.False(t, ids[s.staffID], s.staffID)
		ids[s.staffID] = true
		require.NoError(t, (&commands.CreateStaff{StaffID: s.staffID, Email: s.spelling, Name: s.name}).Validate())
	}
	require.Len(t, seen, 100, "every address is sent")
	require.Greater(t, mixed, 900, "most spellings are in mixed case")
	distinct := map[string]bool{}
	for _, e := range p.emails {
		require.False(t, distinct[e], e)
		distinct[e] = true
		require.Equal(t, strings.ToLower(e), e)
	}

	again := newPlan(42, 1000, 100, 3)
	require.Equal(t, p.emails, again.emails)
	for i := range p.sends {
		require.Equal(t, p.sends[i].spelling, again.sends[i].spelling)
		require.Equal(t, p.sends[i].email, again.sends[i].email)
		require.NotEqual(t, p.sends[i].staffID, again.sends[i].staffID)
	}
	require.NotEqual(t, p.emails, newPlan(43, 1000, 100, 3).emails)
	require.NotZero(t, newPlan(0, 10, 1, 1).seed)
}
