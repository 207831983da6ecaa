package postgres

import (
	"context"
	"slices"
	"time"
)

// The lock connections grow with what the store holds. PostgreSQL walks a
// session's whole local lock table at the end of every statement, so a
// round trip on a connection costs more the more locks it holds (the
// figures are in docs/PERFORMANCE.md, "Figures behind the design"). New
// grants therefore go only to the active set: the base connections
// (Config.LockConns) and the extra ones, except those holding
// Config.LocksPerConn locks or more (full). When fewer than LockConns
// connections are active, one more is opened (at most maxConns in all);
// locks held for a long time stay on the full connections, whose round
// trips are rare (their own unlocks), while the churn of short locks runs
// on nearly empty ones. An extra connection that holds nothing, while
// enough others are active, closes; one that fails is not replaced.

// lockConns returns the store's lock connections now.
func (s *Store) lockConns() []*lockConn {
	s.connsMu.Lock()
	defer s.connsMu.Unlock()
	return slices.Clone(s.conns)
}

// rebalance recomputes the active set, and opens one more connection when
// too few are active.
func (s *Store) rebalance() {
	s.connsMu.Lock()
	defer s.connsMu.Unlock()
	s.rebalanceLocked()
}

func (s *Store) rebalanceLocked() {
	if s.closing {
		return
	}
	active := make([]*lockConn, 0, len(s.conns))
	for _, c := range s.conns {
		if !c.full.Load() && c.accepting() {
			active = append(active, c)
		}
	}
	if len(active) < s.cfg.LockConns && len(s.conns) < s.maxConns && !s.growing &&
		time.Since(s.growFailed) >= s.cfg.ReconnectBackoff {
		s.growing = true
		c := newLockConn(s, s.nextIndex, false)
		s.nextIndex++
		s.conns = append(s.conns, c)
		s.wg.Add(1)
		go c.run()
	}
	if len(active) == 0 {
		// Every connection is full and no more may open: spread over the
		// base connections anyway (MaxHeld bounds the total).
		active = slices.Clone(s.conns[:s.cfg.LockConns])
	}
	s.active.Store(&active)
}

// accepting reports whether new grants may go to c (full aside): a base
// connection always (while it is down they go to another that is up, or
// fail fast), an extra one once connected, until it retires.
func (c *lockConn) accepting() bool {
	if c.base {
		return true
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.up && !c.retired
}

// grown is told by an extra connection whether it connected.
func (s *Store) grown(c *lockConn, err error) {
	s.connsMu.Lock()
	defer s.connsMu.Unlock()
	s.growing = false
	if err != nil {
		// Try again once the backoff has passed: nothing else may call
		// rebalance meanwhile (no connection changes state).
		s.growFailed = time.Now()
		if !s.closing {
			s.growRetry = time.AfterFunc(s.cfg.ReconnectBackoff, s.rebalance)
		}
		return
	}
	s.rebalanceLocked()
}

// removeConn takes a retired extra connection out of the store.
func (s *Store) removeConn(c *lockConn) {
	s.connsMu.Lock()
	defer s.connsMu.Unlock()
	s.conns = slices.DeleteFunc(s.conns, func(o *lockConn) bool { return o == c })
	s.rebalanceLocked()
}

// retireIdle closes c, an extra connection, when it holds nothing and
// enough other connections are active, and reports whether it did. Its
// owner goroutine calls it, and returns when it did.
func (s *Store) retireIdle(c *lockConn) bool {
	if c.load.Load() != 0 {
		return false
	}
	s.connsMu.Lock()
	others := 0
	for _, o := range *s.active.Load() {
		if o != c {
			others++
		}
	}
	if others < s.cfg.LockConns || s.closing {
		s.connsMu.Unlock()
		return false
	}
	c.mu.Lock()
	if len(c.pending) > 0 || c.load.Load() != 0 {
		c.mu.Unlock()
		s.connsMu.Unlock()
		return false
	}
	c.retired = true
	c.up = false
	c.avail.Store(connDown)
	c.pid = 0
	c.mu.Unlock()
	s.conns = slices.DeleteFunc(s.conns, func(o *lockConn) bool { return o == c })
	s.rebalanceLocked()
	s.connsMu.Unlock()

	ctx, cancel := context.WithTimeout(context.Background(), s.cfg.Timeout)
	_ = c.conn.Close(ctx)
	cancel()
	c.conn = nil
	return true
}
