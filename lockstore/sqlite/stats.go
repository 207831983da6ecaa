package sqlite

import "github.com/claimbus/claimbus/lockstore"

var _ lockstore.StatsReporter = (*Store)(nil)

// Stats reports the store's in-process locks, those of Serialize,
// Exclusive and Begin: Held and Waiting as lockstore.Memory counts them.
// The store opens no connections of its own, so Conns and the round-trip
// counters stay 0.
func (s *Store) Stats() lockstore.Stats { return s.mem.Stats() }
