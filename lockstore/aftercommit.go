package lockstore

import (
	"context"
	"sync"
)

type effectsKey struct{}

// Effects collects the functions registered with AfterCommit inside one
// outermost transaction. Backends create it with NewEffects when they open
// an outermost transaction, call Run after the commit and the release of
// the lock, and drop it on rollback. A savepoint inside it is a nested
// scope: see NestEffects.
type Effects struct {
	mu  sync.Mutex
	fns []func()
	// parent is the enclosing scope of a nested one (NestEffects), and
	// merged is set once Merge has moved fns there: what is registered
	// afterwards goes to parent too.
	parent *Effects
	merged bool
}

// NewEffects returns a ctx in which AfterCommit registers into the returned
// Effects instead of running at once. It is for backends: application code
// calls AfterCommit.
func NewEffects(ctx context.Context) (context.Context, *Effects) {
	e := &Effects{}
	return context.WithValue(ctx, effectsKey{}, e), e
}

// NestEffects opens a nested scope inside the one ctx carries, for a
// backend's savepoint: AfterCommit inside the returned ctx registers into
// the returned child. When the savepoint is released, the backend calls
// child.Merge, which moves the child's functions, in order, to the
// enclosing scope (they run when the outermost transaction commits, and
// never if it rolls back); when it rolls back to the savepoint, the backend
// drops the child, and its functions never run, whatever the enclosing
// scope does next.
func NestEffects(ctx context.Context) (context.Context, *Effects) {
	parent, _ := ctx.Value(effectsKey{}).(*Effects)
	e := &Effects{parent: parent}
	return context.WithValue(ctx, effectsKey{}, e), e
}

// Merge ends a nested scope (see NestEffects) whose savepoint was released:
// its functions move to the enclosing scope, after those registered there
// so far, and later registrations in it go there too. Without an enclosing
// scope they run at once, as does anything registered in it afterwards.
func (e *Effects) Merge() {
	e.mu.Lock()
	fns := e.fns
	e.fns = nil
	e.merged = true
	e.mu.Unlock()
	for _, f := range fns {
		e.forward(f)
	}
}

// Run runs the registered functions once each, in the order they were
// registered, including those registered by the functions themselves.
func (e *Effects) Run() {
	for {
		e.mu.Lock()
		fns := e.fns
		e.fns = nil
		e.mu.Unlock()
		if len(fns) == 0 {
			return
		}
		for _, f := range fns {
			f()
		}
	}
}

// add registers f, or forwards it once e is merged.
func (e *Effects) add(f func()) {
	e.mu.Lock()
	if !e.merged {
		e.fns = append(e.fns, f)
		e.mu.Unlock()
		return
	}
	e.mu.Unlock()
	e.forward(f)
}

// forward hands f of a merged scope to the enclosing one, or runs it when
// there is none.
func (e *Effects) forward(f func()) {
	if e.parent != nil {
		e.parent.add(f)
		return
	}
	f()
}

// AfterCommit runs f once the outermost transaction that ctx is inside (one
// opened by a store's Serialize) has committed and its lock is released.
// When that transaction rolls back, f never runs; nor does it when f was
// registered inside a nested Serialize that rolled back to its savepoint.
// Outside any transaction, f runs at once. Use it for effects that must not
// be seen before the data is: publishing an event, notifying a socket,
// starting a job.
func AfterCommit(ctx context.Context, f func()) {
	if e, ok := ctx.Value(effectsKey{}).(*Effects); ok && e != nil {
		e.add(f)
		return
	}
	f()
}
