package idempotency_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/claimbus/claimbus/bus"
	"github.com/claimbus/claimbus/claimstore"
	"github.com/claimbus/claimbus/idempotency"
	"github.com/claimbus/claimbus/internal/testlog"
	"github.com/claimbus/claimbus/lockstore"
	"github.com/claimbus/claimbus/middleware"
)

// repeatStorm sends n concurrent Pays with one key, spread over the buses,
// and checks the handler ran once and every sender got its answer. front
// is a counter placed before the idempotency middleware on every bus: the
// handler holds the first run until all n commands entered their
// pipelines, so the repeats are concurrent with the first run, not after
// it (were the lock missing, all n would be in the handler by then).
func repeatStorm(t *testing.T, e *env, n int, front *counter, buses ...*bus.Bus) {
	t.Helper()
	e.gate = func(context.Context, *Pay) error {
		// The handler's goroutine, not the test's: assert reports without
		// FailNow, and the error fails the sends, checked below.
		if !assert.Eventually(t, func() bool { return front.before.Load() == int64(n) }, 10*time.Second, time.Millisecond, "every repeat in its pipeline") { //nolint:forbidigo // see above
			return errors.New("not every repeat entered its pipeline")
		}
		return nil
	}
	receipts := make([]Receipt, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			receipts[i], errs[i] = pay(t, buses[i%len(buses)], Pay{Key: "storm", Amount: 7})
		}()
	}
	wg.Wait()
	require.EqualValues(t, 1, e.runs.Load(), "the handler ran more than once")
	for i := range n {
		require.NoError(t, errs[i], "sender %d", i)
		require.Equal(t, Receipt{Amount: 7, Run: 1}, receipts[i], "sender %d", i)
	}
}

func TestConcurrentRepeatsRunOnce(t *testing.T) {
	t.Parallel()
	for _, tr := range transports {
		t.Run(tr.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			front := &counter{}
			repeatStorm(t, e, 100, front, e.node(tr.cfg(t), front, e.middleware(e.config())))
		})
	}
}

func TestConcurrentRepeatsOverTwoNodesRunOnce(t *testing.T) {
	t.Parallel()
	for _, readFirst := range []bool{false, true} {
		t.Run(map[bool]string{false: "lock first", true: "read first"}[readFirst], func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			cfg := e.config()
			cfg.ReadFirst = readFirst
			// Two buses sharing one Locker and one Store are two nodes.
			front := &counter{}
			a := e.node(bus.Config{}, front, e.middleware(cfg))
			b := e.node(bus.Config{}, front, e.middleware(cfg))
			repeatStorm(t, e, 100, front, a, b)
		})
	}
}

func TestReadFirstAnswersARepeatWithoutTheLock(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	locker := &countingLocker{Locker: e.mem}
	store := &faultyStore{Outcomes: e.store}
	cfg := e.config()
	cfg.Locker, cfg.Store, cfg.ReadFirst = locker, store, true
	b := e.node(bus.Config{}, e.middleware(cfg))
	first, err := pay(t, b, Pay{Key: "k", Amount: 5})
	require.NoError(t, err)
	lookups, saves, _ := store.counts()
	require.EqualValues(t, 2, locker.calls.Load(), "a new key: lock and unlock")
	require.Equal(t, []int{2, 1}, []int{lookups, saves}, "a new key: a read before the lock, one under it, and the write")

	again, err := pay(t, b, Pay{Key: "k", Amount: 5})
	require.NoError(t, err)
	require.Equal(t, first, again)
	lookups, _, _ = store.counts()
	require.EqualValues(t, 2, locker.calls.Load(), "the repeat called the Locker")
	require.Equal(t, 3, lookups, "the repeat: one read")

	_, err = pay(t, b, Pay{Key: "k", Amount: 6})
	require.ErrorIs(t, err, middleware.ErrIdempotencyConflict)
	require.EqualValues(t, 1, e.runs.Load())
}

func TestLaterRepeatGetsTheStoredResultWithoutLaterHooks(t *testing.T) {
	t.Parallel()
	for _, tr := range transports {
		t.Run(tr.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			later := &counter{}
			b := e.node(tr.cfg(t), e.middleware(e.config()), later)
			first, err := pay(t, b, Pay{Key: "k", Amount: 5})
			require.NoError(t, err)
			require.Equal(t, Receipt{Amount: 5, Run: 1}, first)
			require.EqualValues(t, 1, later.before.Load())

			for range 3 {
				again, err := pay(t, b, Pay{Key: "k", Amount: 5})
				require.NoError(t, err)
				require.Equal(t, first, again, "a repeat decodes as the first answer")
			}
			require.EqualValues(t, 1, e.runs.Load())
			require.EqualValues(t, 1, later.before.Load(), "a repeat ran a later BeforeDispatch")
			require.EqualValues(t, 1, later.after.Load(), "a repeat ran a later after hook")
		})
	}
}

func TestDifferingPayloadIsAConflictAndChangesNothing(t *testing.T) {
	t.Parallel()
	for _, tr := range transports {
		t.Run(tr.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			b := e.node(tr.cfg(t), e.middleware(e.config()))
			first, err := pay(t, b, Pay{Key: "k", Amount: 5})
			require.NoError(t, err)

			_, err = pay(t, b, Pay{Key: "k", Amount: 6})
			require.ErrorIs(t, err, middleware.ErrIdempotencyConflict)
			require.ErrorIs(t, err, middleware.ErrIdempotencyConflict)
			var rej *middleware.Rejection
			require.ErrorAs(t, err, &rej)
			require.Equal(t, middleware.CodeIdempotencyConflict, rej.Code)
			require.EqualValues(t, 1, e.runs.Load())

			again, err := pay(t, b, Pay{Key: "k", Amount: 5})
			require.NoError(t, err)
			require.Equal(t, first, again, "the conflict changed the stored outcome")
			require.EqualValues(t, 1, e.runs.Load())
		})
	}
}

func TestRejectedFirstRunIsTheAnswerOfItsRepeats(t *testing.T) {
	t.Parallel()
	for _, code := range []string{"insufficient_funds", middleware.CodeAlreadyTaken, middleware.CodeInvalid} {
		t.Run(code, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			b := e.node(bus.Config{}, e.middleware(e.config()))
			_, err := pay(t, b, Pay{Key: "k", Amount: 5, Fail: code})
			var first *middleware.Rejection
			require.ErrorAs(t, err, &first)
			require.Equal(t, code, first.Code)

			_, err = pay(t, b, Pay{Key: "k", Amount: 5, Fail: code})
			var again *middleware.Rejection
			require.ErrorAs(t, err, &again)
			require.Equal(t, first, again)
			require.EqualValues(t, 1, e.runs.Load(), "a rejected command's repeat ran the handler")
		})
	}
}

func TestTransientFailureIsNotStored(t *testing.T) {
	t.Parallel()
	failures := map[string]error{
		"plain error":  errors.New("payment provider down"),
		"unavailable":  middleware.Reject(middleware.CodeUnavailable, "", "try again"),
		"timeout":      fmt.Errorf("wrapped: %w", middleware.ErrTimeout),
		"locked":       middleware.ErrLocked,
		"done context": context.Canceled,
	}
	for name, failure := range failures {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			e.gate = func(context.Context, *Pay) error {
				if e.runs.Load() == 1 {
					return failure
				}
				return nil
			}
			b := e.node(bus.Config{}, e.middleware(e.config()))
			_, err := pay(t, b, Pay{Key: "k", Amount: 5})
			require.Error(t, err)

			// The retry, with the same payload, runs again, and its
			// answer is stored.
			retry := requireRunsAgain(t, b, "a transient failure")
			again, err := pay(t, b, Pay{Key: "k", Amount: 5})
			require.NoError(t, err)
			require.Equal(t, retry, again)
			require.EqualValues(t, 2, e.runs.Load())
		})
	}
}

func TestPanicIsNotStored(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	panicked := false
	e.gate = func(context.Context, *Pay) error {
		if !panicked {
			panicked = true
			panic(middleware.ErrInvalid) // a rejection in a panic is no answer
		}
		return nil
	}
	b := e.node(bus.Config{}, e.middleware(e.config()))
	_, err := pay(t, b, Pay{Key: "k", Amount: 5})
	require.Error(t, err)
	requireRunsAgain(t, b, "a panic is not stored")
}

func TestRetentionExpiryRunsTheKeyAgain(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	b := e.node(bus.Config{}, e.middleware(e.config()))
	_, err := pay(t, b, Pay{Key: "k", Amount: 5})
	require.NoError(t, err)
	e.clock.Advance(time.Hour - time.Nanosecond)
	again, err := pay(t, b, Pay{Key: "k", Amount: 5})
	require.NoError(t, err)
	require.EqualValues(t, 1, again.Run, "answered before the retention passed")

	e.clock.Advance(time.Nanosecond)
	after, err := pay(t, b, Pay{Key: "k", Amount: 5})
	require.NoError(t, err)
	require.EqualValues(t, 2, after.Run, "the retention passed: the key runs again")
	require.EqualValues(t, 2, e.runs.Load())
}

func TestCommandWithoutKeyPassesThrough(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	b := e.node(bus.Config{}, e.middleware(e.config()))
	for range 2 {
		_, err := pay(t, b, Pay{Amount: 5})
		require.NoError(t, err)
	}
	require.EqualValues(t, 2, e.runs.Load())
	require.Zero(t, int(e.mem.Stats().Held))
}

func TestTwoCommandTypesNeverShareAKey(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	m := e.middleware(idempotency.Config{Locker: e.locker, Store: e.store, Retention: time.Hour})
	r, err := middleware.NewRunner(middleware.RunnerConfig{Middleware: []middleware.Middleware{m}})
	require.NoError(t, err)
	runs := 0
	h := func(context.Context, *middleware.Pipeline) (any, error) { runs++; return runs, nil }
	for _, name := range []string{"A", "B", "A", "B"} {
		p := middleware.NewPipeline(context.Background(), &Pay{})
		p.CommandName, p.CommandUUID = name, "same-uuid"
		_, err := r.Run(context.Background(), p, h)
		require.NoError(t, err)
	}
	require.Equal(t, 2, runs, "one run per command type")
}

func TestDefaultKeyIsTheCommandUUID(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	m := e.middleware(idempotency.Config{Locker: e.locker, Store: e.store, Retention: time.Hour})
	r, err := middleware.NewRunner(middleware.RunnerConfig{Middleware: []middleware.Middleware{m}})
	require.NoError(t, err)
	runs := 0
	h := func(context.Context, *middleware.Pipeline) (any, error) {
		runs++
		return Receipt{Amount: 1, Run: int64(runs)}, nil
	}
	var answers []string
	for _, id := range []string{"u1", "u1", "u2"} {
		p := middleware.NewPipeline(context.Background(), &Pay{})
		p.CommandName, p.CommandUUID = "Pay", id
		res, err := r.Run(context.Background(), p, h)
		require.NoError(t, err)
		b, err := marshal(res)
		require.NoError(t, err)
		answers = append(answers, b)
	}
	require.Equal(t, 2, runs)
	require.Equal(t, []string{`{"Amount":1,"Run":1}`, `{"Amount":1,"Run":1}`, `{"Amount":1,"Run":2}`}, answers)
}

func TestHaltedDoneByALaterHookIsStoredAsSuccess(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	done := middleware.Hooks{OnBeforeDispatch: func(_ context.Context, p *middleware.Pipeline) {
		p.Respond(Receipt{Amount: 9, Run: 0})
		p.Halt(nil)
	}}
	b := e.node(bus.Config{}, e.middleware(e.config()), done)
	first, err := pay(t, b, Pay{Key: "k", Amount: 9})
	require.NoError(t, err)
	require.Equal(t, Receipt{Amount: 9}, first)
	n, _ := e.store.PurgeOutcomes(context.Background(), 10)
	require.Zero(t, n)
	_, found, err := e.store.Outcome(context.Background(), payKeyOf("k"))
	require.NoError(t, err)
	require.True(t, found, "a command halted as done stores its response")
	require.Zero(t, e.runs.Load())
}

func TestLookupFailureIsUnavailableAndReleasesTheKey(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	cause := errors.New("database down")
	fs := &faultyStore{Outcomes: e.store, outcomeErr: cause}
	cfg := e.config()
	cfg.Store = fs
	b := e.node(bus.Config{}, e.middleware(cfg))
	_, err := pay(t, b, Pay{Key: "k", Amount: 5})
	require.ErrorIs(t, err, middleware.ErrUnavailable)
	require.NotContains(t, err.Error(), "database down", "the cause crossed the wire")
	require.Zero(t, e.runs.Load())
	require.Zero(t, int(e.mem.Stats().Held), "the key is still locked")

	// The cause is kept beside the rejection, for the node's own logs.
	r, err := middleware.NewRunner(middleware.RunnerConfig{Middleware: []middleware.Middleware{e.middleware(cfg)}})
	require.NoError(t, err)
	p := middleware.NewPipeline(context.Background(), &Pay{Key: "k"})
	_, err = r.Run(context.Background(), p, func(context.Context, *middleware.Pipeline) (any, error) { return nil, nil })
	require.ErrorIs(t, err, cause)
	require.ErrorIs(t, err, middleware.ErrUnavailable)
}

func TestFailedSaveIsLoggedAndTheAnswerUnchanged(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	fs := &faultyStore{Outcomes: e.store, saveErr: errors.New("disk full")}
	var logs syncBuffer
	cfg := e.config()
	cfg.Store = fs
	cfg.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	b := e.node(bus.Config{}, e.middleware(cfg))
	first, err := pay(t, b, Pay{Key: "k", Amount: 5})
	require.NoError(t, err)
	require.Equal(t, Receipt{Amount: 5, Run: 1}, first)
	require.Contains(t, logs.String(), "level=ERROR")
	require.Contains(t, logs.String(), "command_id=")
	require.Contains(t, logs.String(), "key="+payKeyOf("k").String())
	require.Contains(t, logs.String(), "disk full")
	require.Zero(t, int(e.mem.Stats().Held), "the key is still locked")

	requireRunsAgain(t, b, "nothing stored")
}

func TestLockWaitPastTheTimeoutIsATimeout(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	cfg := e.config()
	cfg.LockTimeout = 20 * time.Millisecond
	b := e.node(bus.Config{}, e.middleware(cfg))
	lk, err := e.mem.TryLock(context.Background(), payKeyOf("k"))
	require.NoError(t, err)
	defer func() { require.NoError(t, lk.Release(context.Background())) }()
	_, err = pay(t, b, Pay{Key: "k", Amount: 5})
	require.ErrorIs(t, err, middleware.ErrTimeout)
	require.Zero(t, e.runs.Load())
}

func TestLockWaitEndsWithTheSendersContext(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	b := e.node(bus.Config{}, e.middleware(e.config()))
	lk, err := e.mem.TryLock(context.Background(), payKeyOf("k"))
	require.NoError(t, err)
	defer func() { require.NoError(t, lk.Release(context.Background())) }()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	_, err = bus.Dispatch[Receipt](ctx, b, &Pay{Key: "k", Amount: 5})
	// Dispatch's own timeout, or the halt's reply with ctx's error when it
	// came first.
	require.Error(t, err)
	require.Regexp(t, "deadline exceeded|canceled", err.Error())
	require.Eventually(t, func() bool { return e.mem.Waiting(payKeyOf("k")) == 0 }, 10*time.Second, time.Millisecond, "the waiter gone")
	require.Zero(t, e.runs.Load())
}

func TestKeyTooLongIsInvalid(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	b := e.node(bus.Config{}, e.middleware(e.config()))
	_, err := pay(t, b, Pay{Key: strings.Repeat("k", lockstore.MaxIDLen+1), Amount: 5})
	require.ErrorIs(t, err, middleware.ErrInvalid)
	require.Zero(t, e.runs.Load())
}

func TestFingerprintErrorIsInvalid(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	cfg := e.config()
	cfg.Fingerprint = func(any) ([]byte, error) { panic("broken fingerprint") }
	b := e.node(bus.Config{}, e.middleware(cfg))
	_, err := pay(t, b, Pay{Key: "k", Amount: 5})
	require.ErrorIs(t, err, middleware.ErrInvalid)
	require.Zero(t, e.runs.Load())
	require.Zero(t, int(e.mem.Stats().Held))
}

func TestLostLockCancelsTheHandler(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	started := make(chan struct{})
	var cause error
	e.gate = func(ctx context.Context, c *Pay) error {
		if e.runs.Load() > 1 {
			return nil
		}
		close(started)
		<-ctx.Done()
		cause = context.Cause(ctx)
		return ctx.Err()
	}
	var logs syncBuffer
	cfg := e.config()
	cfg.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	b := e.node(bus.Config{}, e.middleware(cfg))
	errc := make(chan error, 1)
	go func() {
		_, err := pay(t, b, Pay{Key: "k", Amount: 5})
		errc <- err
	}()
	<-started
	require.NoError(t, e.mem.Reset(context.Background())) // the lease ran out
	require.Error(t, <-errc)
	require.ErrorIs(t, cause, lockstore.ErrLockLost)
	require.ErrorIs(t, cause, lockstore.ErrLockLost, "a lost lock, whichever middleware")
	require.Contains(t, logs.String(), "lock lost")

	requireRunsAgain(t, b, "nothing stored")
}

func TestPurge(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	cfg := e.config()
	cfg.PurgeBatch = 2
	m := e.middleware(cfg)
	ctx := context.Background()
	for _, id := range []string{"a", "b", "c", "d", "e"} {
		require.NoError(t, e.store.SaveOutcome(ctx, payKeyOf(id), claimstore.Outcome{Result: []byte("1")}, time.Minute))
	}
	n, err := m.Purge(ctx)
	require.NoError(t, err)
	require.Zero(t, n, "nothing expired yet")
	e.clock.Advance(time.Minute)
	n, err = m.Purge(ctx)
	require.NoError(t, err)
	require.Equal(t, 5, n, "every page purged")
}

func TestRunPurgerPurgesUntilItsContextEnds(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	fs := &faultyStore{Outcomes: e.store}
	cfg := e.config()
	cfg.Store = fs
	m := e.middleware(cfg)
	require.Error(t, m.RunPurger(context.Background(), 0))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- m.RunPurger(ctx, time.Millisecond) }()
	require.Eventually(t, func() bool { _, _, purges := fs.counts(); return purges >= 2 }, 10*time.Second, time.Millisecond, "two purges")
	cancel()
	require.ErrorIs(t, <-done, context.Canceled)
}

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ok := e.config()
	tests := []struct {
		name  string
		edit  func(c *idempotency.Config)
		wants []string
	}{
		{"valid", func(*idempotency.Config) {}, nil},
		{"no locker", func(c *idempotency.Config) { c.Locker = nil }, []string{"Config.Locker is nil"}},
		{"no store", func(c *idempotency.Config) { c.Store = nil }, []string{"Config.Store is nil"}},
		{"no retention", func(c *idempotency.Config) { c.Retention = 0 }, []string{"Config.Retention is 0s"}},
		{"negative retention", func(c *idempotency.Config) { c.Retention = -time.Second }, []string{"Config.Retention is -1s"}},
		{"long namespace", func(c *idempotency.Config) { c.Namespace = strings.Repeat("n", lockstore.MaxNamespaceLen) }, []string{"Config.Namespace is 128 bytes"}},
		{"negative lock timeout", func(c *idempotency.Config) { c.LockTimeout = -1 }, []string{"Config.LockTimeout is negative"}},
		{"negative purge batch", func(c *idempotency.Config) { c.PurgeBatch = -1 }, []string{"Config.PurgeBatch is negative"}},
		{"everything", func(c *idempotency.Config) { *c = idempotency.Config{LockTimeout: -1} },
			[]string{"Config.Locker is nil", "Config.Store is nil", "Config.Retention is 0s", "Config.LockTimeout is negative"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			cfg := ok
			tt.edit(&cfg)
			_, err := idempotency.New(cfg)
			if tt.wants == nil {
				require.NoError(t, err)
				return
			}
			require.Error(t, err)
			for _, w := range tt.wants {
				require.Contains(t, err.Error(), w)
			}
		})
	}
}

// syncBuffer is the tests' log sink.
type syncBuffer = testlog.Buffer

func TestLaterAfterHookPanicIsNotStored(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	var once sync.Once
	later := middleware.Hooks{OnAfterDispatch: func(context.Context, *middleware.Pipeline) {
		once.Do(func() { panic("after hook broken") })
	}}
	b := e.node(bus.Config{}, e.middleware(e.config()), later)
	_, err := pay(t, b, Pay{Key: "k", Amount: 5})
	require.ErrorContains(t, err, "after hook broken")
	requireRunsAgain(t, b, "the sender got an error")
}
