package middleware_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/claimbus/claimbus/lockstore"
	"github.com/claimbus/claimbus/lockstore/lockstoretest"
	"github.com/claimbus/claimbus/middleware"
)

// Transfer is a command that locks its transfer, and its wallets when
// Wallets is set.
type Transfer struct {
	ID      string
	Wallets []string
}

// transferKeys names the locks of a command: its transfer (and wallets);
// other commands take none.
func transferKeys(cmd any) []lockstore.Key {
	t, ok := cmd.(*Transfer)
	if !ok {
		return nil
	}
	keys := []lockstore.Key{{Namespace: "transfer", ID: t.ID}}
	for _, w := range t.Wallets {
		keys = append(keys, lockstore.Key{Namespace: "wallet", ID: w})
	}
	return keys
}

func transferKey(id string) lockstore.Key { return lockstore.Key{Namespace: "transfer", ID: id} }

func newMemory(t *testing.T, cfg lockstore.MemoryConfig) *lockstore.Memory {
	t.Helper()
	m, err := lockstore.NewMemory(cfg)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, m.Close()) })
	return m
}

// lockRunner returns a runner of a Lock middleware on locker, then mws.
func lockRunner(t *testing.T, cfg middleware.LockConfig, mws ...middleware.Middleware) *middleware.Runner {
	t.Helper()
	cfg.Logger = discardLogger
	if cfg.Keys == nil {
		cfg.Keys = transferKeys
	}
	lock, err := middleware.Lock(cfg)
	require.NoError(t, err)
	return newRunner(t, append([]middleware.Middleware{lock}, mws...)...)
}

// run runs cmd through r with h and reports whether h ran.
func run(ctx context.Context, r *middleware.Runner, cmd any, h middleware.HandlerFunc) (bool, error) {
	ran := false
	p := middleware.NewPipeline(ctx, cmd)
	_, err := r.Run(ctx, p, func(ctx context.Context, p *middleware.Pipeline) (any, error) {
		ran = true
		if h == nil {
			return nil, nil
		}
		return h(ctx, p)
	})
	return ran, err
}

// requireFree fails unless key can be taken now.
func requireFree(t *testing.T, store lockstore.Locker, key lockstore.Key) {
	t.Helper()
	l, err := store.TryLock(context.Background(), key)
	require.NoError(t, err, "%s is still held", key)
	require.NoError(t, l.Release(context.Background()))
}

func TestLockHeldHaltsAsLocked(t *testing.T) {
	t.Parallel()
	store := newMemory(t, lockstore.MemoryConfig{})
	r := lockRunner(t, middleware.LockConfig{Locker: store})

	holder, err := store.TryLock(context.Background(), transferKey("t1"))
	require.NoError(t, err)
	ran, err := run(context.Background(), r, &Transfer{ID: "t1"}, nil)
	require.False(t, ran)
	require.ErrorIs(t, err, middleware.ErrLocked)
	require.ErrorContains(t, err, "transfer/t1")

	require.NoError(t, holder.Release(context.Background()))
	ran, err = run(context.Background(), r, &Transfer{ID: "t1"}, func(ctx context.Context, p *middleware.Pipeline) (any, error) {
		v, ok := p.Assigned("lock")
		require.True(t, ok)
		locks := v.([]lockstore.Lock)
		require.Len(t, locks, 1)
		require.Equal(t, transferKey("t1"), locks[0].Key())
		require.Greater(t, locks[0].Token(), holder.Token(), "a new grant has a greater fencing token")
		return nil, nil
	})
	require.True(t, ran)
	require.NoError(t, err)
	requireFree(t, store, transferKey("t1"))
}

func TestLockWait(t *testing.T) {
	t.Parallel()
	t.Run("times out", func(t *testing.T) {
		t.Parallel()
		store := newMemory(t, lockstore.MemoryConfig{})
		r := lockRunner(t, middleware.LockConfig{Locker: store, Wait: 20 * time.Millisecond})
		holder, err := store.TryLock(context.Background(), transferKey("t1"))
		require.NoError(t, err)
		defer holder.Release(context.Background())

		ran, err := run(context.Background(), r, &Transfer{ID: "t1"}, nil)
		require.False(t, ran)
		require.ErrorIs(t, err, middleware.ErrTimeout)
		require.ErrorContains(t, err, "still locked after 20ms")
		require.Zero(t, store.Waiting(transferKey("t1")), "a timed-out waiter leaves the queue")
	})
	t.Run("is granted when the holder releases", func(t *testing.T) {
		t.Parallel()
		store := newMemory(t, lockstore.MemoryConfig{})
		r := lockRunner(t, middleware.LockConfig{Locker: store, Wait: waitTimeout})
		holder, err := store.TryLock(context.Background(), transferKey("t1"))
		require.NoError(t, err)

		done := make(chan error, 1)
		go func() {
			ran, err := run(context.Background(), r, &Transfer{ID: "t1"}, nil)
			if err == nil && !ran {
				err = errors.New("handler did not run")
			}
			done <- err
		}()
		require.Eventually(t, func() bool { return store.Waiting(transferKey("t1")) == 1 }, waitTimeout, time.Millisecond)
		require.NoError(t, holder.Release(context.Background()))
		select {
		case err := <-done:
			require.NoError(t, err)
		case <-time.After(waitTimeout):
			t.Fatal("the waiting command was not granted the lock")
		}
		requireFree(t, store, transferKey("t1"))
	})
	t.Run("the command's context ending is not a rejection", func(t *testing.T) {
		t.Parallel()
		store := newMemory(t, lockstore.MemoryConfig{})
		ctx, cancel := context.WithCancel(context.Background())
		r := lockRunner(t, middleware.LockConfig{Locker: store, Wait: waitTimeout})
		holder, err := store.TryLock(context.Background(), transferKey("t1"))
		require.NoError(t, err)
		defer holder.Release(context.Background())

		go func() {
			// Cancel once the command waits (or at the deadline, failing
			// the checks below).
			for deadline := time.Now().Add(waitTimeout); store.Waiting(transferKey("t1")) == 0 && time.Now().Before(deadline); {
				time.Sleep(time.Millisecond) //nolint:forbidigo // polls on the canceller's goroutine, where require cannot fail the test
			}
			cancel()
		}()
		p := middleware.NewPipeline(ctx, &Transfer{ID: "t1"})
		_, err = r.Run(ctx, p, func(context.Context, *middleware.Pipeline) (any, error) { return nil, nil })
		require.ErrorIs(t, err, context.Canceled)
		require.False(t, p.Halted(), "the sender went away: the command is not rejected")
		require.False(t, middleware.Handled(p))
	})
}

func TestLockReleasedOnEveryOutcome(t *testing.T) {
	t.Parallel()
	halting := middleware.Hooks{OnBeforeDispatch: func(_ context.Context, p *middleware.Pipeline) {
		if p.Command.(*Transfer).ID == "halt" {
			p.Halt(middleware.ErrInvalid)
		}
	}}
	tests := []struct {
		name    string
		id      string
		handler middleware.HandlerFunc
		ctx     func() context.Context
		check   func(t *testing.T, err error)
	}{
		{
			name:    "success",
			id:      "ok",
			handler: func(context.Context, *middleware.Pipeline) (any, error) { return nil, nil },
			check:   func(t *testing.T, err error) { require.NoError(t, err) },
		},
		{
			name:    "handler error",
			id:      "err",
			handler: func(context.Context, *middleware.Pipeline) (any, error) { return nil, errHandler },
			check:   func(t *testing.T, err error) { require.ErrorIs(t, err, errHandler) },
		},
		{
			name:    "handler panic",
			id:      "panic",
			handler: func(context.Context, *middleware.Pipeline) (any, error) { panic("boom") },
			check: func(t *testing.T, err error) {
				var perr *middleware.PanicError
				require.ErrorAs(t, err, &perr)
			},
		},
		{
			name:    "a later middleware halts",
			id:      "halt",
			handler: func(context.Context, *middleware.Pipeline) (any, error) { return nil, nil },
			check:   func(t *testing.T, err error) { require.ErrorIs(t, err, middleware.ErrInvalid) },
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			store := newMemory(t, lockstore.MemoryConfig{})
			r := lockRunner(t, middleware.LockConfig{Locker: store}, halting)
			var heldInHandler bool
			_, err := run(context.Background(), r, &Transfer{ID: tt.id, Wallets: []string{"w1"}},
				func(ctx context.Context, p *middleware.Pipeline) (any, error) {
					_, err := store.TryLock(ctx, transferKey(tt.id))
					heldInHandler = errors.Is(err, lockstore.ErrLocked)
					return tt.handler(ctx, p)
				})
			tt.check(t, err)
			// The handler records heldInHandler before it fails or panics.
			require.Equal(t, tt.id != "halt", heldInHandler, "the handler runs under the lock, and a halted one not at all")
			require.Zero(t, int(store.Stats().Held), "every lock is released")
			requireFree(t, store, transferKey(tt.id))
		})
	}
}

func TestLockLostCancelsHandler(t *testing.T) {
	t.Parallel()
	clock := lockstoretest.NewClock(time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC))
	store := newMemory(t, lockstore.MemoryConfig{TTL: time.Minute, Clock: clock})
	r := lockRunner(t, middleware.LockConfig{Locker: store})

	started := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		_, err := run(context.Background(), r, &Transfer{ID: "t1"}, func(ctx context.Context, _ *middleware.Pipeline) (any, error) {
			close(started)
			select {
			case <-ctx.Done():
				return nil, context.Cause(ctx)
			case <-time.After(waitTimeout):
				return nil, errors.New("the handler's context was not cancelled")
			}
		})
		done <- err
	}()
	select {
	case <-started:
	case <-time.After(waitTimeout):
		t.Fatal("the handler did not start")
	}
	clock.Advance(time.Minute) // the lease runs out: the lock is lost

	select {
	case err := <-done:
		require.ErrorIs(t, err, lockstore.ErrLockLost)
		require.ErrorContains(t, err, "transfer/t1")
	case <-time.After(waitTimeout):
		t.Fatal("the run did not end")
	}
	requireFree(t, store, transferKey("t1"))
}

// releaseFailsLocker is a Locker whose locks fail to release with err,
// after releasing in the store under it.
type releaseFailsLocker struct {
	lockstore.Locker
	err error
}

func (l releaseFailsLocker) TryLock(ctx context.Context, key lockstore.Key) (lockstore.Lock, error) {
	lk, err := l.Locker.TryLock(ctx, key)
	if err != nil {
		return nil, err
	}
	return releaseFailsLock{lk, l.err}, nil
}

type releaseFailsLock struct {
	lockstore.Lock
	err error
}

func (l releaseFailsLock) Release(ctx context.Context) error {
	return errors.Join(l.Lock.Release(ctx), l.err)
}

// A release that fails is logged by the after hook with the command id and
// the key: at Error when the lock was lost while the command ran (its lease
// ran out under the handler), at Warn for any other failure.
func TestLockReleaseErrorIsLogged(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	logged := func(t *testing.T, cfg middleware.LockConfig, h middleware.HandlerFunc) ([]map[string]any, error) {
		t.Helper()
		buf := &syncBuffer{}
		cfg.Keys = transferKeys
		cfg.Logger = slog.New(slog.NewJSONHandler(buf, nil))
		lock, err := middleware.Lock(cfg)
		require.NoError(t, err)
		p := middleware.NewPipeline(ctx, &Transfer{ID: "t1"})
		p.CommandUUID = "cmd-1"
		_, err = newRunner(t, lock).Run(ctx, p, h)
		return buf.records(t), err
	}

	t.Run("lost", func(t *testing.T) {
		t.Parallel()
		clock := lockstoretest.NewClock(time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC))
		store := newMemory(t, lockstore.MemoryConfig{TTL: time.Minute, Clock: clock})
		recs, err := logged(t, middleware.LockConfig{Locker: store}, func(ctx context.Context, _ *middleware.Pipeline) (any, error) {
			clock.Advance(time.Minute) // the lease runs out while the handler runs
			select {
			case <-ctx.Done():
				return nil, context.Cause(ctx)
			case <-time.After(waitTimeout):
				return nil, errors.New("the handler's context was not cancelled")
			}
		})
		require.ErrorIs(t, err, lockstore.ErrLockLost)
		require.Len(t, recs, 1)
		require.Equal(t, "ERROR", recs[0]["level"])
		require.Equal(t, "lock lost while the command ran", recs[0]["msg"])
		require.Equal(t, "cmd-1", recs[0]["command_id"])
		require.Equal(t, "transfer/t1", recs[0]["key"])
		require.Contains(t, recs[0]["error"], lockstore.ErrLockLost.Error())
		requireFree(t, store, transferKey("t1"))
	})

	t.Run("other failure", func(t *testing.T) {
		t.Parallel()
		store := newMemory(t, lockstore.MemoryConfig{})
		locker := releaseFailsLocker{Locker: store, err: errors.New("unlock went unanswered")}
		recs, err := logged(t, middleware.LockConfig{Locker: locker}, func(context.Context, *middleware.Pipeline) (any, error) {
			return nil, nil
		})
		require.NoError(t, err, "a failed release does not fail a command that succeeded")
		require.Len(t, recs, 1)
		require.Equal(t, "WARN", recs[0]["level"])
		require.Equal(t, "lock release failed", recs[0]["msg"])
		require.Equal(t, "cmd-1", recs[0]["command_id"])
		require.Equal(t, "transfer/t1", recs[0]["key"])
		require.Equal(t, "unlock went unanswered", recs[0]["error"])
		requireFree(t, store, transferKey("t1"))
	})
}

func TestLockStoreFailures(t *testing.T) {
	t.Parallel()
	t.Run("a closed store is unavailable", func(t *testing.T) {
		t.Parallel()
		store, err := lockstore.NewMemory(lockstore.MemoryConfig{})
		require.NoError(t, err)
		require.NoError(t, store.Close())
		r := lockRunner(t, middleware.LockConfig{Locker: store})
		ran, err := run(context.Background(), r, &Transfer{ID: "t1"}, nil)
		require.False(t, ran)
		require.ErrorIs(t, err, middleware.ErrUnavailable)
	})
	t.Run("an invalid key is invalid", func(t *testing.T) {
		t.Parallel()
		store := newMemory(t, lockstore.MemoryConfig{})
		r := lockRunner(t, middleware.LockConfig{Locker: store})
		ran, err := run(context.Background(), r, &Transfer{ID: ""}, nil)
		require.False(t, ran)
		require.ErrorIs(t, err, middleware.ErrInvalid)
	})
	t.Run("a command without keys passes through", func(t *testing.T) {
		t.Parallel()
		store := newMemory(t, lockstore.MemoryConfig{})
		r := lockRunner(t, middleware.LockConfig{Locker: store})
		ran, err := run(context.Background(), r, &CreateStaff{Email: "ann@x.org"}, func(_ context.Context, p *middleware.Pipeline) (any, error) {
			_, ok := p.Assigned("lock")
			require.False(t, ok)
			return nil, nil
		})
		require.True(t, ran)
		require.NoError(t, err)
	})
}

func TestLockSeveralKeys(t *testing.T) {
	t.Parallel()
	store := newMemory(t, lockstore.MemoryConfig{})
	r := lockRunner(t, middleware.LockConfig{Locker: store, AssignKey: "locks"})

	ran, err := run(context.Background(), r, &Transfer{ID: "t1", Wallets: []string{"w2", "w1"}},
		func(ctx context.Context, _ *middleware.Pipeline) (any, error) {
			p, ok := middleware.PipelineFromContext(ctx)
			require.True(t, ok)
			v, _ := p.Assigned("locks")
			var keys []string
			for _, l := range v.([]lockstore.Lock) {
				keys = append(keys, l.Key().String())
			}
			require.Equal(t, []string{"transfer/t1", "wallet/w1", "wallet/w2"}, keys, "taken in the store's order")
			return nil, nil
		})
	require.True(t, ran)
	require.NoError(t, err)

	w2, err := store.TryLock(context.Background(), lockstore.Key{Namespace: "wallet", ID: "w2"})
	require.NoError(t, err)
	ran, err = run(context.Background(), r, &Transfer{ID: "t2", Wallets: []string{"w1", "w2"}}, nil)
	require.False(t, ran)
	require.ErrorIs(t, err, middleware.ErrLocked)
	require.ErrorContains(t, err, "wallet/w2")
	require.Equal(t, 1, int(store.Stats().Held), "the keys taken before the held one are released")
	require.NoError(t, w2.Release(context.Background()))
}

// TestLockConcurrent runs many commands on one transfer at once: never two
// handlers inside together, and every command either ran or was locked
// (TryLock), or ran (waiting).
func TestLockConcurrent(t *testing.T) {
	t.Parallel()
	for _, wait := range []time.Duration{0, waitTimeout} {
		t.Run(fmt.Sprintf("wait=%v", wait), func(t *testing.T) {
			t.Parallel()
			store := newMemory(t, lockstore.MemoryConfig{})
			r := lockRunner(t, middleware.LockConfig{Locker: store, Wait: wait})
			var inside, maxInside, ran, locked atomic.Int64
			const goroutines, perG = 16, 50
			var wg sync.WaitGroup
			errs := make(chan error, goroutines*perG)
			for range goroutines {
				wg.Go(func() {
					for range perG {
						did, err := run(context.Background(), r, &Transfer{ID: "t1"}, func(context.Context, *middleware.Pipeline) (any, error) {
							n := inside.Add(1)
							for {
								m := maxInside.Load()
								if n <= m || maxInside.CompareAndSwap(m, n) {
									break
								}
							}
							inside.Add(-1)
							return nil, nil
						})
						switch {
						case did && err == nil:
							ran.Add(1)
						case errors.Is(err, middleware.ErrLocked):
							locked.Add(1)
						default:
							errs <- fmt.Errorf("ran=%v err=%w", did, err)
						}
					}
				})
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				require.NoError(t, err)
			}
			require.EqualValues(t, 1, maxInside.Load())
			require.EqualValues(t, goroutines*perG, ran.Load()+locked.Load())
			if wait > 0 {
				require.Zero(t, locked.Load())
			}
			require.Zero(t, int(store.Stats().Held))
		})
	}
}

func TestLockConfigValidate(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		cfg     middleware.LockConfig
		wantErr []string
	}{
		{name: "valid", cfg: middleware.LockConfig{Locker: newMemory(t, lockstore.MemoryConfig{}), Keys: transferKeys}},
		{
			name:    "every problem is reported",
			cfg:     middleware.LockConfig{Wait: -time.Second},
			wantErr: []string{"Locker is nil", "Keys is nil", "Wait is negative"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := tt.cfg.Validate()
			_, lerr := middleware.Lock(tt.cfg)
			if len(tt.wantErr) == 0 {
				require.NoError(t, err)
				require.NoError(t, lerr)
				return
			}
			for _, want := range tt.wantErr {
				require.ErrorContains(t, err, want)
			}
			require.Error(t, lerr)
		})
	}
}
