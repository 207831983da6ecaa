package keyqueue

import (
	"math/rand/v2"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"
)

type testKey struct{ ns, id string }

type entry struct {
	key testKey
	h   uint64
}

func (e *entry) TableKey() testKey { return e.key }

// TestTable checks the table against a map under random puts, sets and
// deletes, with hashes from a small range so that probe runs collide, wrap
// around the end of the slots and get shifted back on delete. (It was the
// memory store's TestLockTable.)
func TestTable(t *testing.T) {
	t.Parallel()
	for _, hashes := range []uint64{1, 7, 64, 1 << 20} {
		t.Run(strconv.FormatUint(hashes, 10), func(t *testing.T) {
			t.Parallel()
			rng := rand.New(rand.NewPCG(1, hashes))
			var table Table[testKey, entry, *entry]
			want := map[testKey]*entry{}
			for step := range 20000 {
				id := rng.IntN(300)
				key := testKey{ns: "t", id: strconv.Itoa(id)}
				h := uint64(id) * 0x9e3779b97f4a7c15 % hashes
				got := table.Get(h, key)
				require.Same(t, want[key], got, "step %d: get %v", step, key)
				switch {
				case got == nil:
					e := &entry{key: key, h: h}
					table.Put(h, e)
					want[key] = e
				case rng.IntN(2) == 0:
					table.Delete(h, key)
					delete(want, key)
				default:
					e := &entry{key: key, h: h}
					table.Set(h, e)
					want[key] = e
				}
				require.Equal(t, len(want), table.Len())
				if step%1000 == 0 {
					requireTableConsistent(t, &table, want)
				}
			}
			requireTableConsistent(t, &table, want)
			for k, e := range want {
				table.Delete(e.h, k)
			}
			require.Zero(t, table.Len())
			require.Equal(t, MinSlots, table.Slots(), "an empty table shrinks back to its minimum")
		})
	}
}

func requireTableConsistent(t *testing.T, table *Table[testKey, entry, *entry], want map[testKey]*entry) {
	t.Helper()
	n := 0
	for e := range table.All {
		require.Same(t, want[e.key], e)
		n++
	}
	require.Equal(t, len(want), n)
	for k, e := range want {
		require.Same(t, e, table.Get(e.h, k))
	}
	require.LessOrEqual(t, table.Len()*4, table.Slots()*3, "load stays under three quarters")
}

func TestZeroTable(t *testing.T) {
	t.Parallel()
	var table Table[testKey, entry, *entry]
	k := testKey{ns: "z", id: "1"}
	require.Nil(t, table.Get(1, k))
	require.Zero(t, table.Slots())
	e := &entry{key: k, h: 1}
	table.Put(1, e)
	require.Same(t, e, table.Get(1, k))
	require.Equal(t, MinSlots, table.Slots())
}

func TestList(t *testing.T) {
	t.Parallel()
	var q List[int]
	ws := make([]*Waiter[int], 6)
	for i := range ws {
		ws[i] = &Waiter[int]{Value: i}
		q.Push(ws[i])
	}
	q.Remove(ws[0]) // the head
	q.Remove(ws[3]) // the middle
	q.Remove(ws[5]) // the tail
	var order []int
	for w := range q.All {
		order = append(order, w.Value)
	}
	require.Equal(t, []int{1, 2, 4}, order)
	require.Equal(t, 3, q.Len())
	moved := q // a list moves as a whole
	for _, want := range []int{1, 2, 4} {
		require.Equal(t, want, moved.Pop().Value)
	}
	require.Nil(t, moved.Pop())
	require.Zero(t, moved.Len())
}
