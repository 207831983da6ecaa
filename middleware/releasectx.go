package middleware

import (
	"context"
	"sync"
	"time"
)

// releaseCtx is the context of the after hooks of one run: the values of
// the command's context without its cancellation, ending at a deadline,
// and cancelled by end. Most runs have hooks that never wait on it, so its
// timer is only made when Done or Err is first called. Until then it
// costs no timer and no allocation, and its Value asks a
// context.WithoutCancel of the parent made on the stack.
//
// Once armed, it is a context.WithDeadline of WithoutCancel(parent), and its Value
// hands the stdlib's own cancellation key to it: a context derived from a
// releaseCtx (WithCancel, AfterFunc) attaches to that timer context like to
// any stdlib one, with no goroutine watching its Done.
type releaseCtx struct {
	parent   context.Context // the command's context
	deadline time.Time

	mu     sync.Mutex
	armed  context.Context // WithoutCancel(parent) with the deadline, once Done or Err was called
	cancel context.CancelFunc
	ended  bool
}

// init makes c a release context of parent ending after timeout.
func (c *releaseCtx) init(parent context.Context, timeout time.Duration) {
	c.parent = parent
	c.deadline = time.Now().Add(timeout)
}

// reset makes c a zero releaseCtx again.
func (c *releaseCtx) reset() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.parent, c.deadline, c.armed, c.cancel, c.ended = nil, time.Time{}, nil, nil, false
}

// ctx returns the armed context, arming it first if need be.
func (c *releaseCtx) ctx() context.Context {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.armed == nil {
		c.armed, c.cancel = context.WithDeadline(context.WithoutCancel(c.parent), c.deadline)
		if c.ended {
			c.cancel()
		}
	}
	return c.armed
}

// end cancels c and stops its timer, if any: the run is over.
func (c *releaseCtx) end() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.ended = true
	if c.cancel != nil {
		c.cancel()
	}
}

// Deadline returns the deadline, without arming c.
func (c *releaseCtx) Deadline() (time.Time, bool) { return c.deadline, true }

// Done arms c and returns its channel.
func (c *releaseCtx) Done() <-chan struct{} { return c.ctx().Done() }

// Err arms c and returns its error.
func (c *releaseCtx) Err() error { return c.ctx().Err() }

// Value returns the value of the command's context under key; once c is
// armed, it asks the armed context, so that context.Cause and derived
// contexts find its cancellation.
func (c *releaseCtx) Value(key any) any {
	c.mu.Lock()
	armed := c.armed
	c.mu.Unlock()
	if armed != nil {
		return armed.Value(key)
	}
	return context.WithoutCancel(c.parent).Value(key)
}
