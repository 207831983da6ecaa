package postgres

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/claimbus/claimbus/lockstore"
)

// calls are the running outermost calls of Serialize and Exclusive, which
// Close stops, and the watcher of Exclusive's session locks (watch.go),
// started with the first Exclusive. The zero value is ready.
type calls struct {
	mu      sync.Mutex
	closed  bool
	running map[*call]struct{}
	watcher *watcher // nil until the first Exclusive holds its lock

	sqlOnce sync.Once
	sql     serialSQL // see Store.serialSQL
}

// call is one outermost call of Serialize or Exclusive, from its first
// wait to the release of its connection. Its ctx, the parent of fn's, is
// cancelled when the call must stop: the store closes (lockstore.ErrClosed)
// or Exclusive's lock is lost (lockstore.ErrLockLost).
type call struct {
	cs     *calls
	ctx    context.Context
	cancel context.CancelCauseFunc

	mu      sync.Mutex
	lost    error    // why the call must stop; the first reason wins
	sock    net.Conn // the socket of the call's connection, once it has one
	aborted bool     // Close closed sock
	ended   bool

	done chan struct{} // closed by end
}

// start registers a call with ctx as the caller's, or fails with
// lockstore.ErrClosed once Close has begun. The caller must call end.
func (cs *calls) start(ctx context.Context) (*call, error) {
	c := &call{cs: cs, done: make(chan struct{})}
	c.ctx, c.cancel = context.WithCancelCause(ctx)
	cs.mu.Lock()
	defer cs.mu.Unlock()
	if cs.closed {
		c.cancel(nil)
		return nil, lockstore.ErrClosed
	}
	if cs.running == nil {
		cs.running = make(map[*call]struct{})
	}
	cs.running[c] = struct{}{}
	return c, nil
}

// use records the socket of the connection the call runs on, for Close to
// close when the call outlives it. It returns the reason the call must stop
// when it has one already.
func (c *call) use(sock net.Conn) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.sock = sock
	return c.lost
}

// lose stops the call for err: fn's ctx is cancelled with err as its
// cause, and Serialize will not commit. Only the first reason counts; after
// end it does nothing.
func (c *call) lose(err error) {
	c.mu.Lock()
	if c.ended || c.lost != nil {
		c.mu.Unlock()
		return
	}
	c.lost = err
	c.mu.Unlock()
	c.cancel(err)
}

// reason returns why the call was stopped, or nil. Serialize asks it just
// before COMMIT: a call stopped by then rolls back. One stopped later has
// its COMMIT on the way, which Close waits for (up to its Timeout).
func (c *call) reason() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.lost
}

// released records that the call's connection goes back to the pool (or
// is closed): Close must not touch its socket any more. It reports whether
// Close closed the socket already, in which case the caller closes the
// connection, so that the pool does not keep it.
func (c *call) released() (aborted bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.sock = nil
	return c.aborted
}

// end deregisters the call, once its connection is released or closed and
// its effects have run, and cancels its ctx.
func (c *call) end() {
	c.mu.Lock()
	c.ended = true
	c.sock = nil
	c.mu.Unlock()
	c.cancel(context.Canceled)
	c.cs.mu.Lock()
	delete(c.cs.running, c)
	c.cs.mu.Unlock()
	close(c.done)
}

// abort closes the socket of a call that outlived Close's Timeout: the
// server ends its session, rolling back its transaction and freeing its
// locks, and its fn's next statement fails. Closing a socket is safe while
// another goroutine uses the connection; the owner's pgx.Conn then sees a
// network error and is never reused.
func (c *call) abort() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.sock != nil {
		_ = c.sock.Close()
		c.aborted = true
	}
}

// closeAll is Close's part for Serialize and Exclusive: it stops every
// running call (cause lockstore.ErrClosed: a waiting one fails, fn's ctx is
// cancelled and its transaction is not committed), waits for them to
// release their connections for nine tenths of timeout (the rest is left
// for closing), and closes the sockets of those that have not, so that no
// transaction of theirs commits, and no lock of theirs is held, once Close
// has returned. The watcher stops with the store's ctx.
func (cs *calls) closeAll(timeout time.Duration) {
	deadline := time.NewTimer(timeout * 9 / 10)
	defer deadline.Stop()
	cs.mu.Lock()
	cs.closed = true
	running := make([]*call, 0, len(cs.running))
	for c := range cs.running {
		running = append(running, c)
	}
	cs.mu.Unlock()

	errClosed := fmt.Errorf("%w while the call ran", lockstore.ErrClosed)
	for _, c := range running {
		c.lose(errClosed)
	}
	for i, c := range running {
		select {
		case <-c.done:
			continue
		case <-deadline.C:
		}
		for _, c := range running[i:] {
			c.abort()
		}
		return
	}
}

// stopCause returns err, wrapped to match the reason the call was stopped
// (lockstore.ErrClosed, lockstore.ErrLockLost) when it has one and err does
// not match it already.
func (c *call) stopCause(err error) error {
	if reason := c.reason(); reason != nil && !errors.Is(err, reason) {
		return fmt.Errorf("%w: %w", reason, err)
	}
	return err
}
