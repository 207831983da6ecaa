// Package txnest is the nesting of the SQL backends' Serialize (see
// lockstore.TxLocker), written once: a nested call runs its fn in a
// savepoint of the open transaction, with its key's token and a nested
// scope of lockstore.AfterCommit effects, releases the savepoint when fn
// succeeds (merging the effects into the enclosing scope), and rolls back
// to it when fn fails, panics or the release fails (dropping them). Held
// records which keys a transaction holds, and their tokens, so that the
// same key reuses its token and a rolled-back savepoint forgets the keys
// taken inside it.
//
// The backends give Run their Savepoint: how to open one (taking the lock
// when their database needs it), release it and roll back to it.
// RunOutermost is the outermost call's part, which Outermost ends.
package txnest

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/claimbus/claimbus/lockstore/internal/effects"

	"github.com/claimbus/claimbus/lockstore"
)

// Name is the savepoint each nested call runs in. Nested calls nest
// strictly, so one name serves them all: PostgreSQL and SQLite both use the
// most recent savepoint of a name.
const Name = "claimbus_nest"

// Statements on the savepoint Name, in the syntax both databases read.
const (
	SavepointSQL  = "savepoint " + Name
	ReleaseSQL    = "release savepoint " + Name
	RollbackToSQL = "rollback to savepoint " + Name
)

// Savepoint is a backend's part of one nested call.
type Savepoint interface {
	// Open opens the savepoint and returns the key's token: token itself
	// when held (the transaction, or an enclosing call, holds the key);
	// else it takes the key's lock in the savepoint when the database
	// needs one, and draws a new token. On error nothing is left open.
	Open(ctx context.Context, token int64, held bool) (int64, error)
	// Release releases the savepoint once fn has succeeded.
	Release() error
	// Rollback undoes everything since the savepoint and ends it. It must
	// work after ctx is done.
	Rollback() error
}

// Nested is one nested call, for Run.
type Nested[Tx any, K comparable] struct {
	// Op ("postgres: Serialize") and Key name the call in errors.
	Op  string
	Key lockstore.Key
	// Tx is the open transaction, Held what it holds, and ID the key's
	// lock identity in Held.
	Tx   Tx
	Held *Held[K]
	ID   K
	// Enclosing reports the token of an enclosing call that holds ID
	// outside the transaction (Exclusive's), when Held does not hold it.
	Enclosing func() (token int64, ok bool)
	// Savepoint is the backend's part.
	Savepoint Savepoint
}

// Run runs fn in a savepoint of n.Tx: it finds the key's token (Held,
// else Enclosing) and opens the savepoint (which takes a new key and
// draws its token), runs fn with the token and a nested effects scope,
// and releases the savepoint when fn succeeds. When fn returns an error,
// it rolls back to the savepoint and returns fn's error as is, joined with
// the rollback's error if that failed too; when fn panics, it rolls back
// before the panic goes on; when the release fails (fn left the
// transaction aborted), it rolls back and returns the release's error. A
// rollback forgets the keys taken inside the savepoint. On any error the
// result is T's zero value.
func Run[T, Tx any, K comparable](ctx context.Context, n Nested[Tx, K], fn func(ctx context.Context, tx Tx) (T, error)) (T, error) {
	var zero T
	sp := n.Savepoint
	mark := n.Held.Mark()
	token, held := n.Held.Token(n.ID)
	if !held {
		token, held = n.Enclosing()
	}
	token, err := sp.Open(ctx, token, held)
	if err != nil {
		n.Held.ForgetSince(mark)
		return zero, err
	}
	if !held {
		n.Held.Took(n.ID, token)
	}
	rollback := func() error {
		n.Held.ForgetSince(mark)
		return sp.Rollback()
	}
	fctx, scope := effects.Nest(ctx)
	fctx = effects.WithToken(fctx, token)
	ended := false
	defer func() {
		// fn panicked: roll back before the panic goes on.
		if !ended {
			_ = rollback()
		}
	}()
	v, err := fn(fctx, n.Tx)
	ended = true
	if err != nil {
		if rbErr := rollback(); rbErr != nil {
			return zero, errors.Join(err, fmt.Errorf("%s %q: rollback to savepoint: %w", n.Op, n.Key, rbErr))
		}
		return zero, err
	}
	if err := sp.Release(); err != nil {
		err = fmt.Errorf("%s %q: release the savepoint: %w", n.Op, n.Key, err)
		if rbErr := rollback(); rbErr != nil {
			err = errors.Join(err, fmt.Errorf("rollback to savepoint: %w", rbErr))
		}
		return zero, err
	}
	scope.Merge()
	return v, nil
}

// Held is what an open transaction holds: the keys (K is the backend's
// lock identity) whose lock and token it has, in the order taken. The zero
// value holds nothing; it is safe for concurrent use.
type Held[K comparable] struct {
	// first is the outermost call's key, kept apart so that a transaction
	// without nested calls allocates nothing more. It is never forgotten:
	// no savepoint encloses it.
	first      K
	firstToken int64
	hasFirst   bool

	mu     sync.Mutex
	nested *heldNested[K] // nil until a nested call takes a key
}

// heldNested is the keys nested calls took.
type heldNested[K comparable] struct {
	tokens map[K]int64
	order  []K // tokens' keys in the order taken (see Mark)
}

// Init records first, with token, as the outermost call's key, on a Held
// that holds nothing yet.
func (h *Held[K]) Init(first K, token int64) {
	h.first, h.firstToken, h.hasFirst = first, token, true
}

// Token returns k's token in the transaction, and whether it holds k.
func (h *Held[K]) Token(k K) (int64, bool) {
	if h.hasFirst && k == h.first {
		return h.firstToken, true
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.nested == nil {
		return 0, false
	}
	t, ok := h.nested.tokens[k]
	return t, ok
}

// Took records that the transaction now holds k, with token.
func (h *Held[K]) Took(k K, token int64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.nested == nil {
		h.nested = &heldNested[K]{tokens: make(map[K]int64)}
	}
	if _, ok := h.nested.tokens[k]; !ok {
		h.nested.order = append(h.nested.order, k)
	}
	h.nested.tokens[k] = token
}

// Mark returns the point to forget back to (ForgetSince) when a savepoint
// opened now rolls back.
func (h *Held[K]) Mark() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.nested == nil {
		return 0
	}
	return len(h.nested.order)
}

// ForgetSince forgets the keys taken since mark: the savepoint opened at
// mark rolled back, undoing them, those of nested calls that had released
// into it included.
func (h *Held[K]) ForgetSince(mark int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.nested == nil {
		return
	}
	for _, k := range h.nested.order[mark:] {
		delete(h.nested.tokens, k)
	}
	h.nested.order = h.nested.order[:mark]
}

// Unit adapts fn, which returns only an error, to the backends' generic
// runs, which return a value too (their tests use it): the methods of
// lockstore.TxLocker call them with it. A nil fn stays nil, for the
// backend's check.
func Unit[A any](fn func(ctx context.Context, a A) error) func(ctx context.Context, a A) (struct{}, error) {
	if fn == nil {
		return nil
	}
	return func(ctx context.Context, a A) (struct{}, error) { return struct{}{}, fn(ctx, a) }
}

// Scope is the open transaction a ctx carries, which Serialize and
// Exclusive of a store S join: one that a Serialize of Store opened, or
// the caller's own attached with WithTx (Store is S's zero value: every
// store of S joins it). K is the backend's lock identity.
type Scope[S comparable, Tx any, K comparable] struct {
	Store S
	Tx    Tx
	// Held is the keys Tx holds, and their tokens: the outermost
	// Serialize's (Held.Init), and those nested calls took.
	Held Held[K]
}

// scopeKey is the ctx key of the Scopes of stores S.
type scopeKey[S comparable] struct{}

// WithScope returns a ctx carrying sc.
func WithScope[S comparable, Tx any, K comparable](ctx context.Context, sc *Scope[S, Tx, K]) context.Context {
	return context.WithValue(ctx, scopeKey[S]{}, sc)
}

// ScopeFor returns the transaction ctx carries that s must run in, or nil.
// A transaction a Serialize opened on another store is not s's: it may be
// on another database, and taking s's locks there would protect nothing.
func ScopeFor[S comparable, Tx any, K comparable](ctx context.Context, s S) *Scope[S, Tx, K] {
	sc, _ := ctx.Value(scopeKey[S]{}).(*Scope[S, Tx, K])
	var none S
	if sc == nil || (sc.Store != none && sc.Store != s) {
		return nil
	}
	return sc
}

// Carried returns the transaction ctx carries, whichever store opened it,
// or nil.
func Carried[S comparable, Tx any, K comparable](ctx context.Context) *Scope[S, Tx, K] {
	sc, _ := ctx.Value(scopeKey[S]{}).(*Scope[S, Tx, K])
	return sc
}

// Outermost is a backend's outermost Serialize transaction, begun and
// holding its key's lock: what RunOutermost ends.
type Outermost interface {
	// Commit commits (or rolls back, when the call must not commit: ctx
	// done, the lock lost), releases the lock, then runs the effects.
	Commit(ctx context.Context) error
	// Rollback rolls back because of cause, releases the lock, and returns
	// cause joined with the rollback's error, if any.
	Rollback(cause error) error
	// End rolls back and releases unless Commit or Rollback did (fn
	// panicked), and ends the call.
	End()
}

// RunOutermost runs fn on tx with fctx (the ctx the backend made for it:
// token, effects, the transaction's Scope), then commits o when fn returns
// nil and rolls it back when fn returns an error, which comes back as is
// (joined with the rollback's error, if any) or panics, before the panic
// goes on. ctx is the caller's, which Commit checks. On any error the
// result is T's zero value.
func RunOutermost[T, Tx any](ctx, fctx context.Context, o Outermost, tx Tx, fn func(ctx context.Context, tx Tx) (T, error)) (T, error) {
	var zero T
	defer o.End()
	v, err := fn(fctx, tx)
	if err != nil {
		return zero, o.Rollback(err)
	}
	if err := o.Commit(ctx); err != nil {
		return zero, err
	}
	return v, nil
}
