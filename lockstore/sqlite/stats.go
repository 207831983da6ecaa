package sqlite

import "github.com/claimbus/claimbus/lockstore"

var _ lockstore.StatsReporter = (*Store)(nil)

// Stats reports the locks held now (Held), the calls waiting for a key now
// (Waiting: Lock, Serialize and Exclusive) and the locks that ended lost,
// by Reset or Close (LocksLost). The store opens no connections of its own
// (Conns is 0): its transactions use the *sql.DB's.
func (s *Store) Stats() lockstore.Stats { return s.mem.Stats() }
