package sentinel_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/claimbus/claimbus/internal/sentinel"
)

func TestNewMatchesItselfAndWhatItAlsoIs(t *testing.T) {
	t.Parallel()
	base := errors.New("base: closed")
	other := errors.New("other")
	s := sentinel.New("pkg: closed", base)

	require.EqualError(t, s, "pkg: closed")
	wrapped := fmt.Errorf("publish x: %w", s)
	require.ErrorIs(t, wrapped, s)
	require.ErrorIs(t, wrapped, base)
	require.NotErrorIs(t, wrapped, other)
	require.NotErrorIs(t, base, s, "the meaning's own sentinel does not match the second name")
	require.NotErrorIs(t, sentinel.New("pkg: closed", base), s, "each sentinel is its own value")
}
