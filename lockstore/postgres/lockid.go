package postgres

import (
	"cmp"

	"github.com/claimbus/claimbus/internal/lockext"
	"github.com/claimbus/claimbus/lockstore"
)

// LockID is the database lock id of a key: the two int4 arguments of
// PostgreSQL's two-int advisory lock functions, pg_advisory_lock(int4, int4)
// and friends. In pg_locks a lock taken with them shows classid = Namespace,
// objid = ID and objsubid = 2.
//
// Every build of claimbus computes the same LockID for the same key, so that
// nodes of different versions agree in one database:
//
//   - a namespace registered in Config.Namespaces maps to its fixed number,
//     0 to 99;
//   - any other namespace maps to 100 + fnv1a32(name) mod (2^31 - 100);
//   - the id maps to fnv1a32(id) & 0x7fffffff;
//
// where fnv1a32 is FNV-1a with 32 bits over the UTF-8 bytes of the string.
// Two distinct keys can share a LockID (a hash collision); they then wait
// for each other like one key, and never let two owners in.
type LockID struct {
	Namespace int32
	ID        int32
}

// The FNV-1a 32-bit parameters (RFC draft-eastlake-fnv, "FNV-1a").
const (
	fnvOffset32 = 2166136261
	fnvPrime32  = 16777619
)

// fnv1a32 hashes the UTF-8 bytes of s with FNV-1a, 32 bits. It is written out
// rather than taken from hash/fnv so the hot path does not allocate.
func fnv1a32(s string) uint32 {
	h := uint32(fnvOffset32)
	for i := 0; i < len(s); i++ {
		h ^= uint32(s[i])
		h *= fnvPrime32
	}
	return h
}

// Limits of namespace numbers.
const (
	// maxRegisteredNamespace is the largest number a registered namespace
	// may take (Config.Namespaces); 0 to maxRegisteredNamespace are reserved
	// for registered namespaces.
	maxRegisteredNamespace = 99
	firstHashedNamespace   = maxRegisteredNamespace + 1
	hashedNamespaceSpan    = 1<<31 - firstHashedNamespace
)

// hashNamespace is the number of a namespace that is not registered.
func hashNamespace(name string) int32 {
	return int32(firstHashedNamespace + fnv1a32(name)%hashedNamespaceSpan)
}

// hashID is the number of an id within its namespace.
func hashID(id string) int32 {
	return int32(fnv1a32(id) & 0x7fffffff)
}

// computeLockID maps a key to its lock id without validating it.
func computeLockID(namespaces map[string]int32, k lockstore.Key) LockID {
	ns, ok := namespaces[k.Namespace]
	if !ok {
		ns = hashNamespace(k.Namespace)
	}
	return LockID{Namespace: ns, ID: hashID(k.ID)}
}

// compareLockIDs orders lock ids by namespace number, then id number.
func compareLockIDs(a, b LockID) int {
	return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.ID, b.ID))
}

// LockID returns the database lock id of k, or an error matching
// lockstore.ErrInvalidKey when k is not valid.
func (s *Store) LockID(k lockstore.Key) (LockID, error) {
	return s.lockID(k)
}

// lockID validates k and maps it to its lock id.
func (s *Store) lockID(k lockstore.Key) (LockID, error) {
	if err := k.Validate(); err != nil {
		return LockID{}, err
	}
	return computeLockID(s.namespaces, k), nil
}

// CompareKeys orders keys by their database lock ids (namespace number, then
// id number), the order in which a caller taking several keys must take
// them so that no two callers on any node deadlock. It implements
// lockext.KeyOrder.
//
// It returns 0 exactly when the two keys share one lock id: a hash collision
// makes them one lock, so lockext.SortKeys keeps only one of them, and
// taking that one protects both (taking both in turn would wait on itself in
// the node-local queue). Invalid keys are ordered by the same hash; taking
// them fails with lockstore.ErrInvalidKey.
func (s *Store) CompareKeys(a, b lockstore.Key) int {
	return compareLockIDs(computeLockID(s.namespaces, a), computeLockID(s.namespaces, b))
}

var _ lockext.KeyOrder[lockstore.Key] = (*Store)(nil)
