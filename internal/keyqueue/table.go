package keyqueue

// Entry is what a Table holds: a pointer to an entry that knows its key.
type Entry[K comparable, V any] interface {
	*V
	// TableKey returns the entry's key; it must not change while the entry
	// is in a table.
	TableKey() K
}

// Table maps keys to entries: an open-addressing hash table with linear
// probing over hashes the caller computes. It grows at three quarters full
// and shrinks at an eighth, so a storm of keys leaves nothing behind but
// MinSlots empty slots; a delete shifts the entries after it back instead
// of leaving a tombstone. Its zero value is empty. It is not safe for
// concurrent use.
//
// A slot holds the key's hash and its entry, a pointer the caller owns
// (which knows its key, see Entry): the table never copies an entry, so a
// pointer to one stays valid while it is in the table and after, and a
// slot is two words, one of them a pointer.
type Table[K comparable, V any, P Entry[K, V]] struct {
	slots []slot[V] // nil or a power of two long
	n     int
}

// slot is one place of a Table; val is nil in an empty slot.
type slot[V any] struct {
	hash uint64
	val  *V
}

// MinSlots is the number of slots a Table has once it holds a key, and
// shrinks back to.
const MinSlots = 8

// Get returns the entry of key, of hash h, or nil.
func (t *Table[K, V, P]) Get(h uint64, key K) *V {
	if t.n == 0 {
		return nil
	}
	mask := uint64(len(t.slots) - 1)
	for i := h & mask; ; i = (i + 1) & mask {
		s := &t.slots[i]
		if s.val == nil || s.hash == h && P(s.val).TableKey() == key {
			return s.val
		}
	}
}

// Put adds v, whose key, of hash h, is not in the table.
func (t *Table[K, V, P]) Put(h uint64, v *V) {
	if (t.n+1)*4 > len(t.slots)*3 {
		t.resize(max(MinSlots, 2*len(t.slots)))
	}
	s := &t.slots[t.free(h)]
	s.hash, s.val = h, v
	t.n++
}

// Set makes v, whose key, of hash h, is in the table, its key's entry in
// place of the one there.
func (t *Table[K, V, P]) Set(h uint64, v *V) {
	t.slots[t.index(h, P(v).TableKey())].val = v
}

// Delete removes key, of hash h, which is in the table.
func (t *Table[K, V, P]) Delete(h uint64, key K) {
	mask := uint64(len(t.slots) - 1)
	i := t.index(h, key)
	// Shift back the entries after i that probed past it, so that every
	// entry stays reachable from its home slot without tombstones.
	for j := (i + 1) & mask; t.slots[j].val != nil; j = (j + 1) & mask {
		home := t.slots[j].hash & mask
		if (j-home)&mask >= (j-i)&mask {
			t.slots[i] = t.slots[j]
			i = j
		}
	}
	t.slots[i] = slot[V]{}
	t.n--
	if len(t.slots) > MinSlots && t.n*8 <= len(t.slots) {
		t.resize(len(t.slots) / 2)
	}
}

// Len returns the number of keys in the table.
func (t *Table[K, V, P]) Len() int { return t.n }

// Slots returns the number of slots the table has now: 0 for the zero
// Table, MinSlots once it shrank back after a storm of keys.
func (t *Table[K, V, P]) Slots() int { return len(t.slots) }

// All yields every entry of the table. The table must not change
// meanwhile.
func (t *Table[K, V, P]) All(yield func(*V) bool) {
	for i := range t.slots {
		if v := t.slots[i].val; v != nil && !yield(v) {
			return
		}
	}
}

// index returns the slot of key, of hash h, which is in the table.
func (t *Table[K, V, P]) index(h uint64, key K) uint64 {
	mask := uint64(len(t.slots) - 1)
	for i := h & mask; ; i = (i + 1) & mask {
		if s := &t.slots[i]; s.val != nil && s.hash == h && P(s.val).TableKey() == key {
			return i
		}
	}
}

// free returns the first empty slot on the probe path of hash h.
func (t *Table[K, V, P]) free(h uint64) uint64 {
	mask := uint64(len(t.slots) - 1)
	i := h & mask
	for t.slots[i].val != nil {
		i = (i + 1) & mask
	}
	return i
}

func (t *Table[K, V, P]) resize(size int) {
	old := t.slots
	t.slots = make([]slot[V], size)
	for _, s := range old {
		if s.val != nil {
			t.slots[t.free(s.hash)] = s
		}
	}
}
