package bus

import (
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
)

func TestNewUUIDIsRandomVersion4(t *testing.T) {
	seen := make(map[string]bool)
	for range 1000 {
		s := newUUID()
		u, err := uuid.Parse(s)
		require.NoError(t, err)
		require.Equal(t, uuid.Version(4), u.Version(), s)
		require.Equal(t, uuid.RFC4122, u.Variant(), s)
		require.Equal(t, u.String(), s)
		require.False(t, seen[s], "repeated %s", s)
		seen[s] = true
	}
}
