package lockstore

import "context"

// A Probe is a read a Prober runs right after it takes a key, in the same
// round trip and on the same connection, so that a claim's lookup costs no
// round trip of its own (see uniqueness.FieldSQL).
type Probe struct {
	// SQL is a query with one parameter, $1, an array of text values; it
	// returns one row per value that is taken, with that value as its only
	// column. The store runs it once for the values of every request of a
	// round trip that carries the same SQL, for example
	//
	//	SELECT email FROM staff WHERE email = ANY($1)
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
}

// Prober is implemented by stores that can answer a Probe in the round trip
// that takes a key.
type Prober interface {
	// TryLockProbe is TryLock that also runs probe once the key is granted,
	// and reports whether probe found its value taken. When the probe
	// fails the key is released and TryLockProbe returns the probe's error,
	// wrapped, and no lock.
	TryLockProbe(ctx context.Context, key Key, probe Probe) (lock Lock, taken bool, err error)
}
