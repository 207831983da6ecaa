package lockstore

import (
	"math/rand/v2"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestLockTable checks the table against a map under random inserts and
// deletes, with hashes from a small range so that probe runs collide, wrap
// around the end of the slots and get shifted back on delete.
func TestLockTable(t *testing.T) {
	t.Parallel()
	for _, hashes := range []uint64{1, 7, 64, 1 << 20} {
		t.Run(strconv.FormatUint(hashes, 10), func(t *testing.T) {
			t.Parallel()
			rng := rand.New(rand.NewPCG(1, hashes))
			var table lockTable
			table.resize(minTableSize)
			want := map[Key]*memLock{}
			for step := range 20000 {
				id := rng.IntN(300)
				key := Key{Namespace: "t", ID: strconv.Itoa(id)}
				h := uint64(id) * 0x9e3779b97f4a7c15 % hashes
				got := table.find(h, key)
				require.Same(t, want[key], got, "step %d: find %s", step, key)
				switch {
				case got == nil:
					l := &memLock{key: key, hash: h}
					table.insert(l)
					want[key] = l
				case rng.IntN(2) == 0:
					table.delete(got)
					delete(want, key)
				default:
					l := &memLock{key: key, hash: h}
					table.replace(got, l)
					want[key] = l
				}
				require.Equal(t, len(want), table.n)
				if step%1000 == 0 {
					requireTableConsistent(t, &table, want)
				}
			}
			requireTableConsistent(t, &table, want)
			for _, l := range want {
				table.delete(l)
			}
			require.Zero(t, table.n)
			require.Len(t, table.slots, minTableSize, "an empty table shrinks back to its minimum")
		})
	}
}

func requireTableConsistent(t *testing.T, table *lockTable, want map[Key]*memLock) {
	t.Helper()
	n := 0
	for l := range table.all {
		require.Same(t, want[l.key], l)
		n++
	}
	require.Equal(t, len(want), n)
	for k, l := range want {
		require.Same(t, l, table.find(l.hash, k))
	}
	require.LessOrEqual(t, table.n*4, len(table.slots)*3, "load stays under three quarters")
}
