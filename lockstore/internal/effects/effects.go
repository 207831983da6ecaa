// Package effects keeps, in a context, what the lock stores' transactions
// carry for the code inside them: the functions lockstore.AfterCommit
// registers, in nested scopes that follow savepoints, and the fencing
// token lockstore.TokenFrom reads.
package effects

import (
	"context"
	"sync"
)

type scopeKey struct{}

type tokenKey struct{}

// Scope collects the functions registered with AfterCommit inside one
// outermost transaction (New) or one savepoint of it (Nest). A backend
// calls Run after the outermost commit and the release of the lock, Merge
// when a savepoint is released, and drops the scope on rollback.
type Scope struct {
	mu  sync.Mutex
	fns []func()
	// parent is the enclosing scope of a nested one, and merged is set
	// once Merge has moved fns there: what is registered afterwards goes
	// to parent too.
	parent *Scope
	merged bool
}

// New returns a ctx in which Register adds to the returned scope instead
// of running at once.
func New(ctx context.Context) (context.Context, *Scope) {
	s := &Scope{}
	return context.WithValue(ctx, scopeKey{}, s), s
}

// Nest opens a nested scope inside the one ctx carries, for a savepoint:
// Register inside the returned ctx adds to the child. When the savepoint
// is released the backend calls child.Merge; when it rolls back to the
// savepoint it drops the child, whose functions then never run, whatever
// the enclosing scope does next.
func Nest(ctx context.Context) (context.Context, *Scope) {
	parent, _ := ctx.Value(scopeKey{}).(*Scope)
	s := &Scope{parent: parent}
	return context.WithValue(ctx, scopeKey{}, s), s
}

// Merge ends a nested scope whose savepoint was released: its functions
// move to the enclosing scope, after those registered there so far, and
// later registrations in it go there too. Without an enclosing scope they
// run at once, as does anything registered in it afterwards.
func (s *Scope) Merge() {
	s.mu.Lock()
	fns := s.fns
	s.fns = nil
	s.merged = true
	s.mu.Unlock()
	for _, f := range fns {
		s.forward(f)
	}
}

// Run runs the registered functions once each, in the order they were
// registered, including those registered by the functions themselves.
func (s *Scope) Run() {
	for {
		s.mu.Lock()
		fns := s.fns
		s.fns = nil
		s.mu.Unlock()
		if len(fns) == 0 {
			return
		}
		for _, f := range fns {
			f()
		}
	}
}

func (s *Scope) add(f func()) {
	s.mu.Lock()
	if !s.merged {
		s.fns = append(s.fns, f)
		s.mu.Unlock()
		return
	}
	s.mu.Unlock()
	s.forward(f)
}

// forward hands f of a merged scope to the enclosing one, or runs it when
// there is none.
func (s *Scope) forward(f func()) {
	if s.parent != nil {
		s.parent.add(f)
		return
	}
	f()
}

// Register adds f to the scope ctx carries, or runs it at once when ctx
// carries none.
func Register(ctx context.Context, f func()) {
	if s, ok := ctx.Value(scopeKey{}).(*Scope); ok && s != nil {
		s.add(f)
		return
	}
	f()
}

// WithToken returns a ctx carrying token as the fencing token of the
// innermost lock the code running with it holds.
func WithToken(ctx context.Context, token int64) context.Context {
	return context.WithValue(ctx, tokenKey{}, token)
}

// Token returns the token ctx carries, and false when it carries none.
func Token(ctx context.Context) (int64, bool) {
	t, ok := ctx.Value(tokenKey{}).(int64)
	return t, ok
}
