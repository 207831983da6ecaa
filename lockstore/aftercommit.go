package lockstore

import (
	"context"
	"sync"
)

type effectsKey struct{}

// Effects collects the functions registered with AfterCommit inside one
// outermost transaction. Backends create it with NewEffects when they open
// an outermost transaction, call Run after the commit and the release of
// the lock, and drop it on rollback.
type Effects struct {
	mu  sync.Mutex
	fns []func()
}

// NewEffects returns a ctx in which AfterCommit registers into the returned
// Effects instead of running at once. It is for backends: application code
// calls AfterCommit.
func NewEffects(ctx context.Context) (context.Context, *Effects) {
	e := &Effects{}
	return context.WithValue(ctx, effectsKey{}, e), e
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

// AfterCommit runs f once the outermost transaction that ctx is inside (one
// opened by a store's Serialize) has committed and its lock is released.
// When that transaction rolls back, f never runs. Outside any transaction, f
// runs at once. Use it for effects that must not be seen before the data is:
// publishing an event, notifying a socket, starting a job.
func AfterCommit(ctx context.Context, f func()) {
	if e, ok := ctx.Value(effectsKey{}).(*Effects); ok && e != nil {
		e.mu.Lock()
		e.fns = append(e.fns, f)
		e.mu.Unlock()
		return
	}
	f()
}
