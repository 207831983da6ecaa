package lockstoretest

import (
	"sync"
	"time"

	"github.com/claimbus/claimbus/lockstore"
)

// Clock is a fake lockstore.Clock for tests. Its time stands still until
// Advance moves it; Advance runs every timer that falls due, in the order
// they fall due and in the goroutine that called Advance, before it returns.
// So a test decides to the nanosecond when a lease ends, and knows that its
// effects (a Lost channel closed, the key handed on) have happened once
// Advance returns. It is safe for concurrent use.
type Clock struct {
	// advancing serializes Advance calls, so timers fire in order.
	advancing sync.Mutex

	mu     sync.Mutex
	now    time.Time
	seq    uint64
	timers map[*clockTimer]struct{}
}

var _ lockstore.Clock = (*Clock)(nil)

// NewClock returns a Clock whose time is start.
func NewClock(start time.Time) *Clock {
	return &Clock{now: start, timers: make(map[*clockTimer]struct{})}
}

// Now returns the clock's time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// AfterFunc schedules f to run once the clock has advanced by d. A timer
// with d <= 0 runs at the next Advance, even Advance(0).
func (c *Clock) AfterFunc(d time.Duration, f func()) lockstore.Timer {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.seq++
	t := &clockTimer{c: c, when: c.now.Add(d), seq: c.seq, f: f}
	c.timers[t] = struct{}{}
	return t
}

// Advance moves the clock forward by d, running every timer that falls due
// on the way, each with the clock set to its due time. Timers that the
// calls schedule run too when they fall due within d.
func (c *Clock) Advance(d time.Duration) {
	c.advancing.Lock()
	defer c.advancing.Unlock()
	c.mu.Lock()
	target := c.now.Add(d)
	for {
		var next *clockTimer
		for t := range c.timers {
			if !t.when.After(target) && (next == nil || t.before(next)) {
				next = t
			}
		}
		if next == nil {
			break
		}
		delete(c.timers, next)
		if next.when.After(c.now) {
			c.now = next.when
		}
		c.mu.Unlock()
		next.f()
		c.mu.Lock()
	}
	c.now = target
	c.mu.Unlock()
}

// Pending returns the number of timers scheduled and not yet run or
// stopped.
func (c *Clock) Pending() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.timers)
}

// clockTimer is one call scheduled on a Clock.
type clockTimer struct {
	c    *Clock
	when time.Time
	seq  uint64
	f    func()
}

// Stop cancels the call; it returns false when the call has run or started,
// or was stopped before.
func (t *clockTimer) Stop() bool {
	t.c.mu.Lock()
	defer t.c.mu.Unlock()
	if _, ok := t.c.timers[t]; !ok {
		return false
	}
	delete(t.c.timers, t)
	return true
}

func (t *clockTimer) before(u *clockTimer) bool {
	if t.when.Equal(u.when) {
		return t.seq < u.seq
	}
	return t.when.Before(u.when)
}
