package sqlite

// ShrinkTokenBlock makes s reserve its fencing tokens n at a time, and
// shrinks the block it holds to the next n tokens, so that a test sees
// reservations. Handing out fewer of the reserved tokens is always safe.
func ShrinkTokenBlock(s *Store, n int64) {
	ts := s.tokens
	ts.mu.Lock()
	defer ts.mu.Unlock()
	ts.block = n
	ts.limit = min(ts.limit, ts.next+n)
}
