package lockstore

// lockTable is the set of held locks of one shard, found by key: an open
// addressing hash table with linear probing over the locks' stored hashes.
// It grows at three quarters full and shrinks at an eighth, so a storm of
// keys leaves nothing behind but minTableSize empty slots. It is not safe
// for concurrent use; its shard's mutex guards it.
type lockTable struct {
	slots []*memLock // nil or a power of two long
	n     int
}

const minTableSize = 8

// find returns the lock held on key, of hash h, or nil.
func (t *lockTable) find(h uint64, key Key) *memLock {
	if t.n == 0 {
		return nil
	}
	mask := uint64(len(t.slots) - 1)
	for i := h & mask; ; i = (i + 1) & mask {
		l := t.slots[i]
		if l == nil || l.hash == h && l.key == key {
			return l
		}
	}
}

// insert adds l, whose key is not in the table.
func (t *lockTable) insert(l *memLock) {
	if (t.n+1)*4 > len(t.slots)*3 {
		t.resize(max(minTableSize, 2*len(t.slots)))
	}
	t.slots[t.free(l.hash)] = l
	t.n++
}

// replace puts next in the slot of old, a lock on the same key.
func (t *lockTable) replace(old, next *memLock) {
	t.slots[t.index(old)] = next
}

// delete removes l, which is in the table.
func (t *lockTable) delete(l *memLock) {
	mask := uint64(len(t.slots) - 1)
	i := t.index(l)
	// Shift back the locks after i that probed past it, so that every lock
	// stays reachable from its home slot without tombstones.
	for j := (i + 1) & mask; t.slots[j] != nil; j = (j + 1) & mask {
		home := t.slots[j].hash & mask
		if (j-home)&mask >= (j-i)&mask {
			t.slots[i] = t.slots[j]
			i = j
		}
	}
	t.slots[i] = nil
	t.n--
	if len(t.slots) > minTableSize && t.n*8 <= len(t.slots) {
		t.resize(len(t.slots) / 2)
	}
}

// all yields every lock in the table. The table must not change meanwhile.
func (t *lockTable) all(yield func(*memLock) bool) {
	for _, l := range t.slots {
		if l != nil && !yield(l) {
			return
		}
	}
}

// index returns the slot of l, which is in the table.
func (t *lockTable) index(l *memLock) uint64 {
	mask := uint64(len(t.slots) - 1)
	i := l.hash & mask
	for t.slots[i] != l {
		i = (i + 1) & mask
	}
	return i
}

// free returns the first empty slot on the probe path of hash h.
func (t *lockTable) free(h uint64) uint64 {
	mask := uint64(len(t.slots) - 1)
	i := h & mask
	for t.slots[i] != nil {
		i = (i + 1) & mask
	}
	return i
}

func (t *lockTable) resize(size int) {
	old := t.slots
	t.slots = make([]*memLock, size)
	for _, l := range old {
		if l != nil {
			t.slots[t.free(l.hash)] = l
		}
	}
}
