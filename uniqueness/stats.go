package uniqueness

import "sync/atomic"

// Stats are the counts of a claimer's claims at one moment.
type Stats struct {
	// Held is the number of claims of this process granted and not yet
	// released.
	Held int64
	// Waiting is the number of claimants of this process waiting for the
	// Locker to grant them a key.
	Waiting int64
	// ReservationsPending is the number of reservations (Reserve) this
	// process wrote and has neither confirmed nor cancelled yet: commands
	// running, or succeeded and confirming. Middleware.Stats only.
	ReservationsPending int64
	// ReservationsConfirmed and ReservationsCancelled count the
	// reservations this process confirmed (its command succeeded) and
	// cancelled (its command failed), since it started. Middleware.Stats
	// only.
	ReservationsConfirmed, ReservationsCancelled int64
}

// Stats counts the claimer's claims now. It visits every key claimants of
// this process wait for or hold, under each shard's lock in turn: cheap
// enough for every metrics scrape, with no cost on the claims themselves.
func (c *claimer) Stats() Stats {
	var st Stats
	for i := range c.shards {
		sh := &c.shards[i]
		sh.mu.Lock()
		for ks := range sh.keys.All {
			st.Waiting += int64(ks.waiting)
			if ks.holder != nil {
				st.Held++
			}
		}
		sh.mu.Unlock()
	}
	return st
}

// Stats counts the claims of the middleware now (see claimer.Stats), and
// its reservations.
func (m *Middleware) Stats() Stats {
	st := m.claimer.Stats()
	st.ReservationsPending = m.resv.pending.Load()
	st.ReservationsConfirmed = m.resv.confirmed.Load()
	st.ReservationsCancelled = m.resv.cancelled.Load()
	return st
}

// reservationCounts are the counts of a middleware's reservations.
type reservationCounts struct {
	pending, confirmed, cancelled atomic.Int64
}

// settled counts a pending reservation as settled into total.
func (c *reservationCounts) settled(total *atomic.Int64) {
	c.pending.Add(-1)
	total.Add(1)
}
