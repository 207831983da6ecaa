package lockstore

// Stats are a store's counters, read at one moment: gauges of what it holds
// now, and totals since it was made. A field a store does not keep is 0;
// each backend's Stats documents which it keeps.
type Stats struct {
	// Held is the number of locks the store holds now.
	Held int64
	// Waiting is the number of calls waiting for a key now.
	Waiting int64
	// Conns is the number of lock connections the store has open now (0
	// for a store that takes no connections of its own).
	Conns int64
	// RoundTrips is the number of statements the store's lock connections
	// sent, and BatchedRequests the lock and unlock requests they carried:
	// BatchedRequests/RoundTrips is the mean batch size.
	RoundTrips      int64
	BatchedRequests int64
	// Reconnects is the number of times a lock connection was connected
	// again after it broke.
	Reconnects int64
	// LocksLost is the number of locks that ended other than by their
	// Release (a lease ran out, a connection broke).
	LocksLost int64
	// CapacityRefusals is the number of lock requests refused with
	// ErrCapacity.
	CapacityRefusals int64
}

// StatsReporter is implemented by stores that report Stats. Stats is cheap
// enough to call on every metrics scrape, and safe for concurrent use.
type StatsReporter interface {
	Stats() Stats
}
