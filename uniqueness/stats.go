package uniqueness

// Stats are the counts of a Claimer's claims at one moment.
type Stats struct {
	// Held is the number of claims of this process granted and not yet
	// released.
	Held int64
	// Waiting is the number of claimants of this process waiting for the
	// Locker to grant them a key.
	Waiting int64
}

// Stats counts the Claimer's claims now. It visits every key claimants of
// this process wait for or hold, under each shard's lock in turn: cheap
// enough for every metrics scrape, with no cost on the claims themselves.
func (c *Claimer) Stats() Stats {
	var st Stats
	for i := range c.shards {
		sh := &c.shards[i]
		sh.mu.Lock()
		for _, ks := range sh.keys {
			st.Waiting += int64(ks.waiting)
			if ks.holder != nil {
				st.Held++
			}
		}
		sh.mu.Unlock()
	}
	return st
}

// Stats counts the claims of the middleware now (see Claimer.Stats).
func (m *Middleware) Stats() Stats { return m.claimer.Stats() }
