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
package txnest

import (
	"context"
	"errors"
	"fmt"
	"sync"

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
	// Enter opens the savepoint (and takes the key's lock in it, when the
	// transaction does not hold it yet) and returns the key's token in the
	// transaction. On error nothing is left open.
	Enter(ctx context.Context) (token int64, err error)
	// Release releases the savepoint once fn has succeeded.
	Release() error
	// Rollback undoes everything since the savepoint, ends it, and forgets
	// the keys taken inside it (Held.ForgetSince). It must work after ctx
	// is done.
	Rollback() error
}

// Run is one nested call: it enters sp, runs fn on tx with the key's token
// and a nested effects scope, and releases sp when fn succeeds. When fn
// returns an error, it rolls back to sp and returns fn's error as is,
// joined with the rollback's error if that failed too; when fn panics, it
// rolls back before the panic goes on; when the release fails (fn left the
// transaction aborted), it rolls back and returns the release's error.
// op ("postgres: Serialize") and key name the call in errors. On any error
// the result is T's zero value.
func Run[T, Tx any](ctx context.Context, op string, key lockstore.Key, tx Tx, sp Savepoint, fn func(ctx context.Context, tx Tx) (T, error)) (T, error) {
	var zero T
	token, err := sp.Enter(ctx)
	if err != nil {
		return zero, err
	}
	fctx, effects := lockstore.NestEffects(ctx)
	fctx = lockstore.ContextWithToken(fctx, token)
	ended := false
	defer func() {
		// fn panicked: roll back before the panic goes on.
		if !ended {
			_ = sp.Rollback()
		}
	}()
	v, err := fn(fctx, tx)
	ended = true
	if err != nil {
		if rbErr := sp.Rollback(); rbErr != nil {
			return zero, errors.Join(err, fmt.Errorf("%s %q: rollback to savepoint: %w", op, key, rbErr))
		}
		return zero, err
	}
	if err := sp.Release(); err != nil {
		err = fmt.Errorf("%s %q: release the savepoint: %w", op, key, err)
		if rbErr := sp.Rollback(); rbErr != nil {
			err = errors.Join(err, fmt.Errorf("rollback to savepoint: %w", rbErr))
		}
		return zero, err
	}
	effects.Merge()
	return v, nil
}

// Held is what an open transaction holds: the keys (K is the backend's
// lock identity) whose lock and token it has, in the order taken. The zero
// value holds nothing; it is safe for concurrent use.
type Held[K comparable] struct {
	// first is the outermost call's key, kept apart from the map so that a
	// transaction without nested calls allocates none. It is never
	// forgotten: no savepoint encloses it.
	first      K
	firstToken int64
	hasFirst   bool

	mu     sync.Mutex
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
	t, ok := h.tokens[k]
	return t, ok
}

// Took records that the transaction now holds k, with token.
func (h *Held[K]) Took(k K, token int64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.tokens == nil {
		h.tokens = make(map[K]int64)
	}
	if _, ok := h.tokens[k]; !ok {
		h.order = append(h.order, k)
	}
	h.tokens[k] = token
}

// Mark returns the point to forget back to (ForgetSince) when a savepoint
// opened now rolls back.
func (h *Held[K]) Mark() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.order)
}

// ForgetSince forgets the keys taken since mark: the savepoint opened at
// mark rolled back, undoing them, those of nested calls that had released
// into it included.
func (h *Held[K]) ForgetSince(mark int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, k := range h.order[mark:] {
		delete(h.tokens, k)
	}
	h.order = h.order[:mark]
}

// Unit adapts fn, which returns only an error, to the generic free
// functions of the backends, which return a value too: the methods of
// lockstore.TxLocker call them with it. A nil fn stays nil, for the
// backend's check.
func Unit[A any](fn func(ctx context.Context, a A) error) func(ctx context.Context, a A) (struct{}, error) {
	if fn == nil {
		return nil
	}
	return func(ctx context.Context, a A) (struct{}, error) { return struct{}{}, fn(ctx, a) }
}
