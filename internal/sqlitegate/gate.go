// Package sqlitegate is the write gate of an SQLite database handle: the
// FIFO queue in which the writers of lockstore/sqlite, claimstore/sqlite
// and their users take turns, in Go, at SQLite's one write lock.
//
// SQLite lets one connection write at a time. A writer that finds the
// lock taken waits in SQLite's busy handler, which sleeps and tries
// again with growing pauses (up to 100 ms): the lock may stay free while
// every waiter sleeps, and a writer may lose every race until its busy
// timeout. Writers that enter the gate first instead wait here, first
// come first served, for as long as their context allows, and find the
// lock free when their turn comes. The busy timeout still bounds the wait
// for writers the gate does not see: another handle on the file, another
// process.
package sqlitegate

import (
	"context"
	"database/sql"
	"errors"
	"runtime"
	"sync"
	"sync/atomic"
	"weak"

	"github.com/claimbus/claimbus/internal/keyqueue"
)

// ErrHeld is what Enter returns when its ctx is inside a turn of the same
// gate that has not ended (a write outside the transaction that holds
// the gate): waiting would wait for itself.
var ErrHeld = errors.New("the caller holds this database's write gate already: " +
	"a write outside its transaction would wait for that transaction, which waits for it")

// Gate is the write gate of one database handle. It is safe for
// concurrent use.
type Gate struct {
	q *keyqueue.Queue[struct{}]
}

// gates are the gates of the handles in use, by handle. An entry goes
// once its handle is garbage.
var gates = struct {
	sync.Mutex
	m map[weak.Pointer[sql.DB]]*Gate
}{m: make(map[weak.Pointer[sql.DB]]*Gate)}

// For returns db's gate: the same one for every caller with db.
func For(db *sql.DB) *Gate {
	k := weak.Make(db)
	gates.Lock()
	defer gates.Unlock()
	if g := gates.m[k]; g != nil {
		return g
	}
	g := &Gate{q: keyqueue.NewQueue(1, func(struct{}) uint64 { return 0 })}
	gates.m[k] = g
	runtime.AddCleanup(db, forget, k)
	return g
}

// forget drops the gate of a handle that is garbage.
func forget(k weak.Pointer[sql.DB]) {
	gates.Lock()
	delete(gates.m, k)
	gates.Unlock()
}

// Turn is one writer's turn at a gate, from Enter to Leave.
type Turn struct {
	g *Gate
	// outer is the turn ctx was inside when this one was entered (of
	// another gate), so that a ctx inside both finds both.
	outer *Turn
	left  atomic.Bool
}

type turnKey struct{}

// Enter waits for g's turn, first come first served behind the writers
// waiting already, until ctx ends (ctx's error). It fails at once with
// ErrHeld when ctx is inside a turn of g (Turn.Context) that has not
// ended.
func (g *Gate) Enter(ctx context.Context) (*Turn, error) {
	outer, _ := ctx.Value(turnKey{}).(*Turn)
	for t := outer; t != nil; t = t.outer {
		if t.g == g && !t.left.Load() {
			return nil, ErrHeld
		}
	}
	if err := g.q.Take(ctx, nil, nil, struct{}{}); err != nil {
		return nil, err
	}
	return &Turn{g: g, outer: outer}, nil
}

// Waiting returns how many writers wait in Enter now, the holder not
// counted.
func (g *Gate) Waiting() int { return g.q.Waiting(struct{}{}) }

// Context returns ctx marked as inside t, so that Enter on t's gate with
// it, or a context derived from it, fails with ErrHeld until t ends.
func (t *Turn) Context(ctx context.Context) context.Context {
	return context.WithValue(ctx, turnKey{}, t)
}

// Leave ends the turn: the first writer waiting takes the gate. Calls
// after the first do nothing.
func (t *Turn) Leave() {
	if t.left.CompareAndSwap(false, true) {
		t.g.q.Pass(struct{}{})
	}
}
