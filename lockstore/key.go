package lockstore

import (
	"cmp"
	"fmt"
	"slices"
	"unicode/utf8"
)

// Limits on the size of a Key, in bytes of UTF-8.
const (
	MaxNamespaceLen = 128
	MaxIDLen        = 512
)

// Key names one lockable resource: a namespace (a kind of resource, such as
// "staff.email" or "transfer") and an id within it.
type Key struct {
	Namespace string
	ID        string
}

// String returns "namespace/id".
func (k Key) String() string { return k.Namespace + "/" + k.ID }

// Validate reports, as an error matching ErrInvalidKey, a key whose namespace
// or id is empty, longer than its limit, or not valid UTF-8.
func (k Key) Validate() error {
	switch {
	case k.Namespace == "":
		return fmt.Errorf("%w: empty namespace (id %.40q)", ErrInvalidKey, k.ID)
	case k.ID == "":
		return fmt.Errorf("%w: empty id in namespace %.40q", ErrInvalidKey, k.Namespace)
	case len(k.Namespace) > MaxNamespaceLen:
		return fmt.Errorf("%w: namespace is %d bytes, the limit is %d", ErrInvalidKey, len(k.Namespace), MaxNamespaceLen)
	case len(k.ID) > MaxIDLen:
		return fmt.Errorf("%w: id is %d bytes, the limit is %d", ErrInvalidKey, len(k.ID), MaxIDLen)
	case !utf8.ValidString(k.Namespace) || !utf8.ValidString(k.ID):
		return fmt.Errorf("%w: not valid UTF-8", ErrInvalidKey)
	}
	return nil
}

// KeyOrder is implemented by stores whose keys have an order that every
// node sharing the store agrees on (for PostgreSQL, the order of the
// database lock ids). A caller that takes several keys takes them in this
// order, so two callers can never deadlock on each other.
type KeyOrder interface {
	// CompareKeys returns a negative number when a comes before b, a
	// positive number when it comes after, and 0 when the two keys map to
	// the same lock.
	CompareKeys(a, b Key) int
}

// CompareKeys orders keys by namespace, then id. It is the order of stores
// that do not implement KeyOrder.
func CompareKeys(a, b Key) int {
	return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.ID, b.ID))
}

// SortKeys sorts keys in the order l takes them (its KeyOrder when it has
// one, CompareKeys otherwise) and drops keys that map to the same lock as
// the key before them, so that taking them in turn never waits on itself.
func SortKeys(l Locker, keys []Key) []Key {
	compare := CompareKeys
	if o, ok := l.(KeyOrder); ok {
		compare = o.CompareKeys
	}
	slices.SortFunc(keys, compare)
	return slices.CompactFunc(keys, func(a, b Key) bool { return compare(a, b) == 0 })
}
