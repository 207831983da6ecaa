package postgres

import (
	"context"
	"sync"

	"github.com/claimbus/claimbus/lockstore"
)

// keyedMutex is the node-local mutex per lock id that Serialize and
// Exclusive take before they touch the database, so that a node's own
// waiters for one key queue in Go instead of each holding a pooled
// connection blocked on the server. One table serves every Store of the
// process, keyed by store and lock id (serialKey), so a Store needs no
// state of its own for it; an entry exists only while it is held or
// awaited, so the table holds nothing for a closed Store.
//
// Each lock id has a channel with room for one token: holding the mutex is
// having put the token in. Senders blocked on a full channel are served in
// the order they arrived, so waiters are granted first come first served; a
// waiter whose ctx ends, or whose store closes, leaves the queue without a
// trace. An entry lives
// while someone holds or waits for its id, and is removed with the last one.
type keyedMutex struct {
	mu      sync.Mutex
	entries map[serialKey]*keyedEntry
}

// serialKey is one lock id of one Store.
type serialKey struct {
	store *Store
	id    LockID
}

// serialMutex is the node-local mutex of Serialize and Exclusive.
var serialMutex = newKeyedMutex()

type keyedEntry struct {
	token chan struct{}
	refs  int // holders and waiters
}

func newKeyedMutex() *keyedMutex {
	return &keyedMutex{entries: make(map[serialKey]*keyedEntry)}
}

// lock waits until id is free, ctx ends (ctx's error) or closed is closed
// (lockstore.ErrClosed). On success the caller holds id and must call
// unlock with the returned entry exactly once.
func (m *keyedMutex) lock(ctx context.Context, closed <-chan struct{}, id serialKey) (*keyedEntry, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	m.mu.Lock()
	e := m.entries[id]
	if e == nil {
		e = &keyedEntry{token: make(chan struct{}, 1)}
		m.entries[id] = e
	}
	e.refs++
	m.mu.Unlock()

	select {
	case e.token <- struct{}{}:
		return e, nil
	default:
	}
	select {
	case e.token <- struct{}{}:
		return e, nil
	case <-ctx.Done():
		m.leave(id, e)
		return nil, ctx.Err()
	case <-closed:
		m.leave(id, e)
		return nil, lockstore.ErrClosed
	}
}

// unlock frees id for its next waiter.
func (m *keyedMutex) unlock(id serialKey, e *keyedEntry) {
	<-e.token
	m.leave(id, e)
}

func (m *keyedMutex) leave(id serialKey, e *keyedEntry) {
	m.mu.Lock()
	e.refs--
	if e.refs == 0 {
		delete(m.entries, id)
	}
	m.mu.Unlock()
}

// queued returns how many callers hold or wait for id (for tests and
// diagnostics).
func (m *keyedMutex) queued(id serialKey) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	if e := m.entries[id]; e != nil {
		return e.refs
	}
	return 0
}
