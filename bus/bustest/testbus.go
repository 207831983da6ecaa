package bustest

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/claimbus/claimbus/bus"
	"github.com/claimbus/claimbus/claimstore"
	"github.com/claimbus/claimbus/lockstore"
	"github.com/claimbus/claimbus/middleware"
)

// Options configure a test bus (NewBus).
type Options struct {
	// Middleware returns the bus's middleware, built on the test bus's
	// stores: uniqueness.New(uniqueness.Config{Locker: s.Locks, ...}) with
	// uniqueness.Reserve(s.Claims, maxLag), middleware.Lock with
	// Locker s.Locks, idempotency with s.Claims. Default: none.
	Middleware func(s Stores) ([]middleware.Middleware, error)
	// Handlers registers the bus's handlers with bus.Handle. Required.
	Handlers func(b *bus.Bus) error
	// Config is the rest of the bus's configuration; its Middleware is
	// replaced by what Middleware returns. Default: the zero Config, a bus
	// in process, whose failure log goes to the test's log (t.Log).
	Config bus.Config
	// OnReset resets the application's own state (its read model, its
	// tables); Reset calls it after the stores. Default: none.
	OnReset func(ctx context.Context) error
}

// Stores are the memory stores of a test bus, shared by its middleware.
type Stores struct {
	// Locks keeps the locks and claims (lockstore.Memory, no lease).
	Locks *lockstore.Memory
	// Claims keeps reservations and idempotency outcomes in memory;
	// TestBus.Reset empties it.
	Claims claimstore.Store
}

// TestBus is a started bus with memory stores, for an application's
// integration tests. It closes itself, then its stores, when the test
// ends.
type TestBus struct {
	// Bus is the bus: bus.Dispatch[R](ctx, tb.Bus, cmd).
	Bus *bus.Bus
	Stores
	claims  *resettableClaims
	mws     []middleware.Middleware
	onReset func(ctx context.Context) error
}

// NewBus starts a bus configured by opts, with fresh memory stores, and
// closes it (then the stores) with t.Cleanup. It fails the test when the
// configuration, the middleware or a handler registration fails.
func NewBus(t testing.TB, opts Options) *TestBus {
	t.Helper()
	require.NotNil(t, opts.Handlers, "bustest: Options.Handlers is required")
	locks, err := lockstore.NewMemory(lockstore.MemoryConfig{})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, locks.Close()) })
	claims := &resettableClaims{m: claimstore.NewMemory(claimstore.MemoryConfig{})}
	tb := &TestBus{Stores: Stores{Locks: locks, Claims: claims}, claims: claims, onReset: opts.OnReset}
	if opts.Middleware != nil {
		tb.mws, err = opts.Middleware(tb.Stores)
		require.NoError(t, err, "bustest: Options.Middleware")
	}
	cfg := opts.Config
	cfg.Middleware = tb.mws
	if cfg.FailureLog == (middleware.FailureLog{}) {
		cfg.FailureLog.Logger = slog.New(slog.NewTextHandler(testWriter{t}, nil))
	}
	tb.Bus = StartBus(t, cfg, func(b *bus.Bus) {
		require.NoError(t, opts.Handlers(b), "bustest: Options.Handlers")
	})
	return tb
}

// flusher is a middleware with work under way after a command's answer,
// such as uniqueness.Middleware's confirmations.
type flusher interface {
	Flush(ctx context.Context) error
}

// Reset makes the stores as new, between the tests that share a bus: it
// waits for the work a middleware still does after an answer (the
// confirmations of uniqueness reservations: Flush), ends every lock held
// (lockstore.Memory.Reset: a holder's Lost closes) and forgets every
// reservation and idempotency outcome. So a value taken before can be
// taken again and a lock held before is free. The uniqueness claims keep
// no state between commands (a claim lives while its command runs), so
// call Reset while no command runs (it fails while a Dispatch waits).
// Then it calls Options.OnReset, for the application's own state.
func (b *TestBus) Reset(ctx context.Context) error {
	if n := b.Bus.Pending(); n > 0 {
		return fmt.Errorf("bustest: Reset while %d Dispatch calls wait for their outcome", n)
	}
	err := resetStores(ctx, b.mws, b.Locks, b.claims)
	if b.onReset != nil {
		err = errors.Join(err, b.onReset(ctx))
	}
	return err
}

// resetStores waits for the work mws do after an answer, then ends every
// lock of locks and forgets what claims keeps.
func resetStores(ctx context.Context, mws []middleware.Middleware, locks *lockstore.Memory, claims *resettableClaims) error {
	var errs []error
	for _, m := range mws {
		if f, ok := m.(flusher); ok {
			errs = append(errs, f.Flush(ctx))
		}
	}
	errs = append(errs, locks.Reset(ctx))
	claims.reset()
	return errors.Join(errs...)
}

// RequireRejection fails the test, with a message saying what err is,
// unless err is, or wraps, a *middleware.Rejection with code and field
// (field "" for a rejection that names none).
func RequireRejection(t testing.TB, err error, code, field string) {
	t.Helper()
	var rej *middleware.Rejection
	switch {
	case err == nil:
		t.Fatalf("bustest: want a rejection %q on field %q, got no error", code, field)
	case !errors.As(err, &rej):
		t.Fatalf("bustest: want a rejection %q on field %q, got an error that is no rejection (%T): %v", code, field, err, err)
	case rej.Code != code || rej.Field != field:
		t.Fatalf("bustest: want a rejection %q on field %q, got %q on field %q: %v", code, field, rej.Code, rej.Field, err)
	}
}

// resettableClaims is a claimstore.Store in memory that reset empties: it
// hands every call to a claimstore.NewMemory store, replaced by a new one at reset.
type resettableClaims struct {
	mu sync.RWMutex
	m  claimstore.Store
}

var _ claimstore.Store = (*resettableClaims)(nil)

func (r *resettableClaims) reset() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.m = claimstore.NewMemory(claimstore.MemoryConfig{})
}

func (r *resettableClaims) store() claimstore.Store {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.m
}

func (r *resettableClaims) Reserve(ctx context.Context, key lockstore.Key, owner string, maxLag time.Duration) (claimstore.Reservation, bool, error) {
	return r.store().Reserve(ctx, key, owner, maxLag)
}

func (r *resettableClaims) Confirm(ctx context.Context, key lockstore.Key, owner string) error {
	return r.store().Confirm(ctx, key, owner)
}

func (r *resettableClaims) Cancel(ctx context.Context, key lockstore.Key, owner string) error {
	return r.store().Cancel(ctx, key, owner)
}

func (r *resettableClaims) Drop(ctx context.Context, key lockstore.Key) error {
	return r.store().Drop(ctx, key)
}

func (r *resettableClaims) List(ctx context.Context, namespace, after string, limit int) ([]claimstore.Reservation, error) {
	return r.store().List(ctx, namespace, after, limit)
}

func (r *resettableClaims) Outcome(ctx context.Context, key lockstore.Key) (claimstore.Outcome, bool, error) {
	return r.store().Outcome(ctx, key)
}

func (r *resettableClaims) SaveOutcome(ctx context.Context, key lockstore.Key, o claimstore.Outcome, retention time.Duration) error {
	return r.store().SaveOutcome(ctx, key, o, retention)
}

func (r *resettableClaims) PurgeOutcomes(ctx context.Context, limit int) (int, error) {
	return r.store().PurgeOutcomes(ctx, limit)
}
