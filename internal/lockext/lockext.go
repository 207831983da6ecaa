// Package lockext holds what a lock store may offer beyond
// lockstore.Locker, and what the claimbus packages use it for: a key order
// every node agrees on (SortKeys), a release that rides the store's next
// round trip (ReleaseLater), and a read run in the round trip that takes a
// key (Probe). A store without them works the same, at the cost of a round
// trip.
package lockext

import (
	"cmp"
	"context"
	"slices"
)

// KeyOrder is implemented by stores whose keys have an order that every
// node sharing the store agrees on (for PostgreSQL, the order of the
// database lock ids). A caller that takes several keys takes them in this
// order, so two callers can never deadlock on each other.
//
// K is lockstore.Key: the package names it by its shape, so that it sits
// below lockstore and imports nothing of the module.
type KeyOrder[K Key] interface {
	// CompareKeys returns a negative number when a comes before b, a
	// positive number when it comes after, and 0 when the two keys map to
	// the same lock.
	CompareKeys(a, b K) int
}

// Key is the shape of lockstore.Key.
type Key interface {
	~struct {
		Namespace string
		ID        string
	}
}

type key = struct {
	Namespace string
	ID        string
}

// CompareKeys orders keys by namespace, then id. It is the order of stores
// that do not implement KeyOrder.
func CompareKeys[K Key](a, b K) int {
	x, y := key(a), key(b)
	return cmp.Or(cmp.Compare(x.Namespace, y.Namespace), cmp.Compare(x.ID, y.ID))
}

// SortKeys sorts keys in the order l takes them (its KeyOrder when it has
// one, CompareKeys otherwise) and drops keys that map to the same lock as
// the key before them, so that taking them in turn never waits on itself.
func SortKeys[K Key](l any, keys []K) []K {
	compare := CompareKeys[K]
	if o, ok := l.(KeyOrder[K]); ok {
		compare = o.CompareKeys
	}
	slices.SortFunc(keys, compare)
	return slices.CompactFunc(keys, func(a, b K) bool { return compare(a, b) == 0 })
}

// LaterReleaser is implemented by locks whose store can carry the unlock in
// a round trip it makes anyway (the PostgreSQL store's next batch), so that
// a holder that does not need to wait for the answer does not pay a round
// trip of its own. ReleaseLater has the contract of the package function
// ReleaseLater.
type LaterReleaser interface {
	ReleaseLater(done func(error))
}

// ReleaseLater gives l up as Release does, without waiting for the store to
// confirm it, when l is a LaterReleaser; otherwise it calls l.Release(ctx)
// and then done. Either way done is called exactly once, with what Release
// would have returned: nil when the lock was held up to the release, an
// error matching lockstore.lockstore.ErrLockLost when it was not or that could not be
// confirmed.
//
// A store calls done in its own goroutine, outside its mutex, as it calls
// a lockstore.AfterLost function: done must be quick and not block.
//
// Until done is called the key may still be held for l: another claimant,
// on this node or another, gets it only once the release is applied, as
// after Release returns. A later Release of l returns nil at once, without
// waiting for that.
func ReleaseLater(ctx context.Context, l interface{ Release(context.Context) error }, done func(error)) {
	if lr, ok := l.(LaterReleaser); ok {
		lr.ReleaseLater(done)
		return
	}
	done(l.Release(ctx))
}

// A Probe is a read a Prober runs right after it takes a key, in the same
// round trip and on the same connection, so that a claim's lookup costs no
// round trip of its own (see uniqueness.FieldSQL).
type Probe struct {
	// SQL is a query with one parameter, $1, an array of text values; it
	// returns one row per value that is taken, with that value as its first
	// column and, when By is set, a second column of text naming who took
	// it (Found.By). The store runs it once for the values of every
	// request of a round trip that carries the same SQL, for example
	//
	//	SELECT email FROM staff WHERE email = ANY($1)
	//	SELECT email, staff_id FROM staff WHERE email = ANY($1)
	//
	// It runs as a statement of its own after the statement that took the
	// lock, so it sees what was committed before the lock was granted. It
	// runs on a connection that other keys share, within the store's
	// round-trip deadline (the PostgreSQL store bounds it with a
	// statement_timeout, so a slow or failing probe fails only its own
	// request): it must be an index lookup. It runs as a prepared
	// statement, so check its generic plan (EXPLAIN after SET
	// plan_cache_mode = force_generic_plan): on a table that was never
	// analyzed, email = ANY($1) is planned as a sequential scan.
	SQL string
	// Value is the value SQL is asked about.
	Value string
	// By is set when SQL's rows have the second column.
	By bool
}

// Found is what a Probe found about its value: whether a row names it,
// and, for a Probe with By, the row's second column (who took the value;
// empty when it is NULL).
type Found struct {
	Taken bool
	By    string
}

// Rows are the rows of a Probe's SQL, as pgx.Rows reads them.
type Rows interface {
	Next() bool
	Scan(dest ...any) error
	Close()
	Err() error
}

// ScanTaken reads and closes the rows of a Probe's SQL: the values found
// taken, each with who took it when by is set (the Probe's By). Of several
// rows for one value, the last that names someone wins.
func ScanTaken(rows Rows, by bool) (map[string]string, error) {
	defer rows.Close()
	taken := make(map[string]string)
	var v string
	var who *string
	dest := []any{&v, &who}
	if !by {
		dest = dest[:1]
	}
	for rows.Next() {
		who = nil
		if err := rows.Scan(dest...); err != nil {
			return nil, err
		}
		if who != nil {
			taken[v] = *who
		} else if _, seen := taken[v]; !seen {
			taken[v] = ""
		}
	}
	return taken, rows.Err()
}

// Prober is implemented by stores that can answer a Probe in the round trip
// that takes a key.
type Prober[K Key, L any] interface {
	// TryLockProbe is TryLock that also runs probe once the key is granted,
	// and reports what probe found. When the probe fails the key is
	// released and TryLockProbe returns the probe's error, wrapped, and no
	// lock.
	TryLockProbe(ctx context.Context, key K, probe Probe) (lock L, found Found, err error)
}
