package postgres

import (
	"sync/atomic"

	"github.com/claimbus/claimbus/lockstore"
)

var _ lockstore.StatsReporter = (*Store)(nil)

// storeStats are the totals of a Store since New.
type storeStats struct {
	roundTrips, requests atomic.Int64
	reconnects           atomic.Int64
	lost                 atomic.Int64
	capacity             atomic.Int64
}

// Stats reports the store's counters: Held, the locks held and the lock
// requests on their way to the server; Waiting, the callers of this node
// (Lock, Serialize, Exclusive, Begin) queued for a key's turn behind
// another of its callers (the caller whose turn it is, polling or waiting
// on the server while another node holds the key, is not counted); Conns,
// the lock connections connected now;
// RoundTrips and BatchedRequests of the lock connections; Reconnects of
// the base lock connections; LocksLost, the locks held on a connection
// that broke (not those ended by Close); CapacityRefusals, the lock
// requests refused for Config.MaxHeld or a full lock table on the server.
func (s *Store) Stats() lockstore.Stats {
	return lockstore.Stats{
		Held:             s.held.Load(),
		Waiting:          s.queue.waiters() + s.serial.waiters(),
		Conns:            s.connsUp(),
		RoundTrips:       s.stats.roundTrips.Load(),
		BatchedRequests:  s.stats.requests.Load(),
		Reconnects:       s.stats.reconnects.Load(),
		LocksLost:        s.stats.lost.Load(),
		CapacityRefusals: s.stats.capacity.Load(),
	}
}

// connsUp counts the lock connections connected now.
func (s *Store) connsUp() int64 {
	var n int64
	for _, c := range s.lockConns() {
		c.mu.Lock()
		if c.up {
			n++
		}
		c.mu.Unlock()
	}
	return n
}
