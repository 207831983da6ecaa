package uniqueness

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/claimbus/claimbus/internal/keyqueue"
	"github.com/claimbus/claimbus/internal/pgtest"
	"github.com/claimbus/claimbus/internal/testwait"
	"github.com/claimbus/claimbus/lockstore"
	"github.com/claimbus/claimbus/lockstore/lockstoretest"
	"github.com/claimbus/claimbus/middleware"
)

// TestMain checks for leaked goroutines and stops the throwaway PostgreSQL
// the tests may have started.
func TestMain(m *testing.M) { pgtest.Main(m) }

// waitFor is how long a test waits for an observable state.
const waitFor = 10 * time.Second

// table is a strongly consistent set of taken values, standing in for the
// table a handler inserts into; it counts the lookups run against it.
type table struct {
	mu      sync.Mutex
	rows    map[string]bool
	lookups atomic.Int64
}

func newTable() *table { return &table{rows: make(map[string]bool)} }

// taken returns the lookup of value.
func (tb *table) taken(value string) func(context.Context) (bool, error) {
	return func(context.Context) (bool, error) {
		tb.lookups.Add(1)
		tb.mu.Lock()
		defer tb.mu.Unlock()
		return tb.rows[value], nil
	}
}

// insert adds value and reports whether it was absent (false means a
// duplicate got through).
func (tb *table) insert(value string) bool {
	tb.mu.Lock()
	defer tb.mu.Unlock()
	if tb.rows[value] {
		return false
	}
	tb.rows[value] = true
	return true
}

func newMemory(t testing.TB, cfg lockstore.MemoryConfig) *lockstore.Memory {
	t.Helper()
	m, err := lockstore.NewMemory(cfg)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, m.Close()) })
	return m
}

// newClaimer is the setup of most tests: a memory store configured by
// cfg, a Claimer on it, and an empty table for the lookups.
func newClaimer(t *testing.T, cfg lockstore.MemoryConfig) (*lockstore.Memory, *claimer, *table) {
	t.Helper()
	store := newMemory(t, cfg)
	return store, makeClaimer(store), newTable()
}

// silentLocker is a Locker whose locks never tell of their loss: their
// Lost is nil, and they are no afterlost watchers (see lockstore.AfterLost).
type silentLocker struct{ lockstore.Locker }

func (l silentLocker) TryLock(ctx context.Context, key lockstore.Key) (lockstore.Lock, error) {
	lk, err := l.Locker.TryLock(ctx, key)
	return silence(lk), err
}

func (l silentLocker) Lock(ctx context.Context, key lockstore.Key) (lockstore.Lock, error) {
	lk, err := l.Locker.Lock(ctx, key)
	return silence(lk), err
}

func silence(lk lockstore.Lock) lockstore.Lock {
	if lk == nil {
		return nil
	}
	return silentLock{lk}
}

// silentLock is a lock of silentLocker.
type silentLock struct{ lockstore.Lock }

func (silentLock) Lost() <-chan struct{} { return nil }

// notTaken is a lookup that finds every value free.
func notTaken(context.Context) (bool, error) { return false, nil }

func key(id string) lockstore.Key { return lockstore.Key{Namespace: "staff.email", ID: id} }

// requireNothingHeld asserts that neither the store nor the claimer keeps
// anything.
func requireNothingHeld(t *testing.T, store *lockstore.Memory, c *claimer) {
	t.Helper()
	held, err := store.Held(context.Background())
	require.NoError(t, err)
	require.Empty(t, held)
	require.Zero(t, c.len(), "the claimer keeps keys nobody waits for")
}

// claimResult is what a claimant started with startClaim ends with.
type claimResult struct {
	claim *hold
	err   error
}

// startClaim claims k in a goroutine and returns where its result arrives.
func startClaim(ctx context.Context, c *claimer, k lockstore.Key, taken func(context.Context) (bool, error)) <-chan claimResult {
	ch := make(chan claimResult, 1)
	go func() {
		cl, err := c.Claim(ctx, k, taken)
		ch <- claimResult{cl, err}
	}()
	return ch
}

func receive(t *testing.T, ch <-chan claimResult) claimResult {
	t.Helper()
	select {
	case r := <-ch:
		return r
	case <-time.After(waitFor):
		t.Fatal("claimant did not finish")
		return claimResult{}
	}
}

// requireStoreWaiting waits until n claimants wait for k in store.
func requireStoreWaiting(t *testing.T, store *lockstore.Memory, k lockstore.Key, n int) {
	t.Helper()
	require.Eventually(t, func() bool { return store.Waiting(k) == n }, waitFor, time.Millisecond,
		"want %d waiting for %s in the store", n, k)
}

func requireWaiting(t *testing.T, c *claimer, k lockstore.Key, n int) {
	t.Helper()
	require.Eventually(t, func() bool { return c.waiting(k) == n }, waitFor, time.Millisecond,
		"want %d claimants waiting for %s", n, k)
}

func TestClaimFreeValueHoldsTheKeyUntilRelease(t *testing.T) {
	t.Parallel()
	store, c, tb := newClaimer(t, lockstore.MemoryConfig{})
	ctx := context.Background()

	cl, err := c.Claim(ctx, key("ann@x.org"), tb.taken("ann@x.org"))
	require.NoError(t, err)
	require.Equal(t, key("ann@x.org"), cl.Key())
	require.Positive(t, cl.Token())
	held, err := store.Held(ctx)
	require.NoError(t, err)
	require.Len(t, held, 1)
	require.Equal(t, key("ann@x.org"), held[0].Key)

	_, err = store.TryLock(ctx, key("ann@x.org"))
	require.ErrorIs(t, err, lockstore.ErrLocked, "the claim must hold the key")

	require.NoError(t, cl.Release(ctx))
	require.NoError(t, cl.Release(ctx), "Release is idempotent")
	require.EqualValues(t, 1, tb.lookups.Load(), "nobody waited: the release re-check is skipped")
	requireNothingHeld(t, store, c)
}

func TestClaimTakenValueReleasesAndFailsWithAlreadyTaken(t *testing.T) {
	t.Parallel()
	store, c, tb := newClaimer(t, lockstore.MemoryConfig{})
	tb.insert("ann@x.org")

	cl, err := c.Claim(context.Background(), key("ann@x.org"), tb.taken("ann@x.org"))
	require.Nil(t, cl)
	require.ErrorIs(t, err, middleware.ErrAlreadyTaken)
	require.ErrorIs(t, err, middleware.ErrAlreadyTaken, "one value for both packages")
	var rej *middleware.Rejection
	require.ErrorAs(t, err, &rej)
	require.Equal(t, middleware.CodeAlreadyTaken, rej.Code)
	requireNothingHeld(t, store, c)
}

// A claim whose lookup finds the value answers already_taken without
// waiting for its store to confirm the unlock: nothing was written under
// the lock, so a store that can carry the unlock in a later round trip
// (lockext.LaterReleaser) is left to, and the key is free once it has.
func TestClaimTakenValueDoesNotWaitForTheUnlock(t *testing.T) {
	t.Parallel()
	store := newMemory(t, lockstore.MemoryConfig{})
	lk := &laterLocker{Locker: store, gate: make(chan struct{}), released: make(chan error, 1)}
	var once sync.Once
	openGate := func() { once.Do(func() { close(lk.gate) }) }
	t.Cleanup(openGate) // a failed assertion leaves no unlock waiting
	c := makeClaimer(lk)
	tb := newTable()
	tb.insert("ann@x.org")

	cl, err := c.Claim(context.Background(), key("ann@x.org"), tb.taken("ann@x.org"))
	require.Nil(t, cl)
	require.ErrorIs(t, err, middleware.ErrAlreadyTaken)
	require.Zero(t, lk.waited.Load(), "the answer waited for the unlock")
	held, err := store.Held(context.Background())
	require.NoError(t, err)
	require.Len(t, held, 1, "Claim answered before its unlock was confirmed")

	openGate() // the store's round trip
	require.NoError(t, testwait.Recv(t, lk.released, waitFor, "the unlock left to later never ran"))
	requireNothingHeld(t, store, c)
}

// laterLocker is a Locker whose locks are lockext.LaterReleasers: a
// ReleaseLater unlocks once gate is closed, then sends Release's result
// to released. It counts the releases waited for.
type laterLocker struct {
	lockstore.Locker
	gate     chan struct{}
	released chan error
	waited   atomic.Int64
}

func (l *laterLocker) TryLock(ctx context.Context, key lockstore.Key) (lockstore.Lock, error) {
	lk, err := l.Locker.TryLock(ctx, key)
	return l.wrap(lk), err
}

func (l *laterLocker) Lock(ctx context.Context, key lockstore.Key) (lockstore.Lock, error) {
	lk, err := l.Locker.Lock(ctx, key)
	return l.wrap(lk), err
}

func (l *laterLocker) wrap(lk lockstore.Lock) lockstore.Lock {
	if lk == nil {
		return nil
	}
	return &laterLock{Lock: lk, l: l}
}

// laterLock is a lock of laterLocker.
type laterLock struct {
	lockstore.Lock
	l *laterLocker
}

func (lk *laterLock) Release(ctx context.Context) error {
	lk.l.waited.Add(1)
	return lk.Lock.Release(ctx)
}

func (lk *laterLock) ReleaseLater(done func(error)) {
	go func() {
		<-lk.l.gate
		err := lk.Lock.Release(context.Background())
		done(err)
		lk.l.released <- err
	}()
}

func TestClaimLookupErrorOrPanicReleasesTheKey(t *testing.T) {
	t.Parallel()
	boom := errors.New("database is down")
	for name, lookup := range map[string]func(context.Context) (bool, error){
		"error": func(context.Context) (bool, error) { return false, boom },
		"panic": func(context.Context) (bool, error) { panic("lookup exploded") },
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			store, c, _ := newClaimer(t, lockstore.MemoryConfig{})

			cl, err := c.Claim(context.Background(), key("ann@x.org"), lookup)
			require.Nil(t, cl)
			require.Error(t, err)
			require.NotErrorIs(t, err, middleware.ErrAlreadyTaken)
			require.Contains(t, err.Error(), "staff.email/ann@x.org")
			if name == "error" {
				require.ErrorIs(t, err, boom)
			} else {
				var perr *middleware.PanicError
				require.ErrorAs(t, err, &perr)
				require.Equal(t, "lookup exploded", perr.Value)
			}
			requireNothingHeld(t, store, c)
		})
	}
}

func TestClaimRejectsBadInput(t *testing.T) {
	t.Parallel()
	store, c, _ := newClaimer(t, lockstore.MemoryConfig{})
	ctx := context.Background()

	_, err := c.Claim(ctx, lockstore.Key{Namespace: "staff.email"}, notTaken)
	require.ErrorIs(t, err, lockstore.ErrInvalidKey)
	_, err = c.Claim(ctx, key(strings.Repeat("a", lockstore.MaxIDLen+1)), notTaken)
	require.ErrorIs(t, err, lockstore.ErrInvalidKey)
	_, err = c.Claim(ctx, key("ann@x.org"), nil)
	require.ErrorIs(t, err, errNilLookup)
	_, err = makeClaimer(nil).Claim(ctx, key("ann@x.org"), notTaken)
	require.ErrorIs(t, err, errNilLocker)

	done, cancel := context.WithCancel(ctx)
	cancel()
	_, err = c.Claim(done, key("ann@x.org"), notTaken)
	require.ErrorIs(t, err, context.Canceled)
	requireNothingHeld(t, store, c)
}

// Release after a write: the holder wrote the value, so every claimant queued
// behind it fails at once, none running its own lookup.
func TestReleaseAfterWriteFailsEveryWaiterFast(t *testing.T) {
	t.Parallel()
	store, c, tb := newClaimer(t, lockstore.MemoryConfig{})
	ctx := context.Background()
	k := key("ann@x.org")

	holder, err := c.Claim(ctx, k, tb.taken("ann@x.org"))
	require.NoError(t, err)

	const waiters = 20
	var waiterLookups atomic.Int64
	results := make([]<-chan claimResult, waiters)
	for i := range results {
		results[i] = startClaim(ctx, c, k, func(context.Context) (bool, error) {
			waiterLookups.Add(1)
			return tb.taken("ann@x.org")(ctx)
		})
	}
	requireWaiting(t, c, k, waiters)

	require.True(t, tb.insert("ann@x.org"))
	require.NoError(t, holder.Release(ctx))

	for _, ch := range results {
		r := receive(t, ch)
		require.ErrorIs(t, r.err, middleware.ErrAlreadyTaken)
		require.Nil(t, r.claim)
	}
	require.Zero(t, waiterLookups.Load(), "waiters behind a settled key must not run their lookups")
	require.EqualValues(t, 2, tb.lookups.Load(), "the claim's lookup and the release re-check")
	requireNothingHeld(t, store, c)
}

// The holder did not write (its handler failed): the next claimant takes
// its turn and runs its own lookup; the one after it is settled by the
// next holder's release.
func TestReleaseWithoutWritePassesTheTurnOn(t *testing.T) {
	t.Parallel()
	store, c, tb := newClaimer(t, lockstore.MemoryConfig{})
	ctx := context.Background()
	k := key("ann@x.org")

	first, err := c.Claim(ctx, k, tb.taken("ann@x.org"))
	require.NoError(t, err)
	second := startClaim(ctx, c, k, tb.taken("ann@x.org"))
	requireStoreWaiting(t, store, k, 1)
	third := startClaim(ctx, c, k, tb.taken("ann@x.org"))
	requireWaiting(t, c, k, 2)

	require.NoError(t, first.Release(ctx))
	r := receive(t, second)
	require.NoError(t, r.err, "the value is still free: the next claimant gets it")
	require.EqualValues(t, 3, tb.lookups.Load(), "claim, re-check, second claimant's own lookup")

	require.True(t, tb.insert("ann@x.org"))
	require.NoError(t, r.claim.Release(ctx))
	r3 := receive(t, third)
	require.ErrorIs(t, r3.err, middleware.ErrAlreadyTaken)
	require.EqualValues(t, 4, tb.lookups.Load(), "the third claimant fails on the re-check, without a lookup")
	requireNothingHeld(t, store, c)
}

func TestFailedReCheckLetsTheNextClaimantRunItsLookup(t *testing.T) {
	t.Parallel()
	store, c, tb := newClaimer(t, lockstore.MemoryConfig{})
	ctx := context.Background()
	k := key("ann@x.org")
	boom := errors.New("replica unreachable")

	var calls atomic.Int64
	flaky := func(context.Context) (bool, error) {
		if calls.Add(1) > 1 {
			return true, boom
		}
		return false, nil
	}
	first, err := c.Claim(ctx, k, flaky)
	require.NoError(t, err)
	next := startClaim(ctx, c, k, tb.taken("ann@x.org"))
	requireWaiting(t, c, k, 1)

	err = first.Release(ctx)
	require.ErrorIs(t, err, boom, "Release reports the failed re-check")
	require.NotErrorIs(t, err, middleware.ErrAlreadyTaken)
	r := receive(t, next)
	require.NoError(t, r.err, "a failed re-check settles nothing")
	require.EqualValues(t, 1, tb.lookups.Load(), "the next claimant ran its own lookup")
	require.NoError(t, r.claim.Release(ctx))
	requireNothingHeld(t, store, c)
}

func TestClaimantsTakeTurnsFirstComeFirstServed(t *testing.T) {
	t.Parallel()
	store, c, _ := newClaimer(t, lockstore.MemoryConfig{})
	ctx := context.Background()
	k := key("ann@x.org")

	first, err := c.Claim(ctx, k, notTaken)
	require.NoError(t, err)
	const n = 8
	results := make([]<-chan claimResult, n)
	for i := range results {
		results[i] = startClaim(ctx, c, k, notTaken)
		requireStoreWaiting(t, store, k, i+1)
	}
	require.NoError(t, first.Release(ctx))
	for i, ch := range results {
		r := receive(t, ch)
		require.NoError(t, r.err, "claimant %d", i)
		for j := i + 1; j < n; j++ {
			select {
			case <-results[j]:
				t.Fatalf("claimant %d got the key before claimant %d released it", j, i)
			default:
			}
		}
		require.NoError(t, r.claim.Release(ctx))
	}
	requireNothingHeld(t, store, c)
}

func TestCancelledWaiterLeavesNoTrace(t *testing.T) {
	t.Parallel()
	store, c, tb := newClaimer(t, lockstore.MemoryConfig{})
	ctx := context.Background()
	k := key("ann@x.org")

	holder, err := c.Claim(ctx, k, tb.taken("ann@x.org"))
	require.NoError(t, err)
	wctx, cancel := context.WithCancel(ctx)
	waiter := startClaim(wctx, c, k, tb.taken("ann@x.org"))
	requireStoreWaiting(t, store, k, 1)
	cancel()
	r := receive(t, waiter)
	require.ErrorIs(t, r.err, context.Canceled)
	require.NotErrorIs(t, r.err, middleware.ErrAlreadyTaken)
	require.Zero(t, c.waiting(k))
	require.Zero(t, store.Waiting(k))

	require.NoError(t, holder.Release(ctx))
	require.EqualValues(t, 1, tb.lookups.Load(), "nobody waits any more: no re-check")
	requireNothingHeld(t, store, c)
}

func TestClaimWaitEndsWithItsDeadline(t *testing.T) {
	t.Parallel()
	store, c, _ := newClaimer(t, lockstore.MemoryConfig{})
	ctx := context.Background()
	k := key("ann@x.org")

	holder, err := c.Claim(ctx, k, notTaken)
	require.NoError(t, err)
	// One waiter alone (no local claimant ahead of it would settle), one
	// behind it: both end with their deadline, neither is granted.
	for range 2 {
		dctx, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
		_, err = c.Claim(dctx, k, notTaken)
		cancel()
		require.ErrorIs(t, err, context.DeadlineExceeded)
	}
	require.NoError(t, holder.Release(ctx))
	requireNothingHeld(t, store, c)
}

// A claim whose lease runs out passes the key on as a release does: the
// next claimant runs its own lookup and, finding the value the lost holder
// wrote, fails the claimants behind it at once.
func TestLostClaimPassesOn(t *testing.T) {
	t.Parallel()
	const ttl = time.Minute
	for _, wrote := range []bool{false, true} {
		t.Run(fmt.Sprintf("wrote=%v", wrote), func(t *testing.T) {
			t.Parallel()
			clock := lockstoretest.NewClock(time.Unix(1_700_000_000, 0))
			store, c, tb := newClaimer(t, lockstore.MemoryConfig{TTL: ttl, Clock: clock})
			ctx := context.Background()
			k := key("ann@x.org")

			holder, err := c.Claim(ctx, k, tb.taken("ann@x.org"))
			require.NoError(t, err)
			second := startClaim(ctx, c, k, tb.taken("ann@x.org"))
			requireStoreWaiting(t, store, k, 1)
			third := startClaim(ctx, c, k, tb.taken("ann@x.org"))
			requireStoreWaiting(t, store, k, 2)
			if wrote {
				require.True(t, tb.insert("ann@x.org"))
			}

			clock.Advance(ttl)
			select {
			case <-holder.Lost():
			default:
				t.Fatal("the claim's Lost channel is open after its lease ran out")
			}
			r2 := receive(t, second)
			if !wrote {
				require.NoError(t, r2.err, "the lost holder wrote nothing: the next claimant gets the key")
				require.EqualValues(t, 2, tb.lookups.Load())
				require.ErrorIs(t, holder.Release(ctx), lockstore.ErrLockLost, "releasing a lost claim reports the loss")
				require.ErrorIs(t, holder.Release(ctx), lockstore.ErrLockLost, "every time")
				_, err := store.TryLock(ctx, k)
				require.ErrorIs(t, err, lockstore.ErrLocked, "the lost claim's release must not free the next owner")
				require.NoError(t, r2.claim.Release(ctx))
				r3 := receive(t, third)
				require.NoError(t, r3.err)
				require.NoError(t, r3.claim.Release(ctx))
			} else {
				require.ErrorIs(t, r2.err, middleware.ErrAlreadyTaken)
				r3 := receive(t, third)
				require.ErrorIs(t, r3.err, middleware.ErrAlreadyTaken)
				require.EqualValues(t, 2, tb.lookups.Load(), "the third claimant fails without a lookup")
				require.ErrorIs(t, holder.Release(ctx), lockstore.ErrLockLost)
			}
			requireNothingHeld(t, store, c)
		})
	}
}

// The sign-up storm on the Claimer alone: 200 claimants, 20 values, each
// writes on success. Exactly one claimant per value wins.
func TestClaimStormOneWinnerPerValue(t *testing.T) {
	t.Parallel()
	store, c, tb := newClaimer(t, lockstore.MemoryConfig{})
	ctx := context.Background()

	const claimants, values = 200, 20
	var won, taken, duplicates atomic.Int64
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range claimants {
		value := fmt.Sprintf("user%02d@x.org", i%values)
		wg.Go(func() {
			<-start
			cl, err := c.Claim(ctx, key(value), tb.taken(value))
			if errors.Is(err, middleware.ErrAlreadyTaken) {
				taken.Add(1)
				return
			}
			if !assertNoError(t, err) {
				return
			}
			won.Add(1)
			if !tb.insert(value) {
				duplicates.Add(1)
			}
			assertNoError(t, cl.Release(ctx))
		})
	}
	close(start)
	wg.Wait()
	require.EqualValues(t, values, won.Load())
	require.EqualValues(t, claimants-values, taken.Load())
	require.Zero(t, duplicates.Load())
	requireNothingHeld(t, store, c)
}

// After a storm on many distinct keys, the claimer keeps nothing.
func TestClaimerForgetsKeysNobodyWaitsFor(t *testing.T) {
	t.Parallel()
	store, c, _ := newClaimer(t, lockstore.MemoryConfig{})
	ctx := context.Background()

	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 1000 {
				k := key(fmt.Sprintf("g%d-%d", g, i%250))
				cl, err := c.Claim(ctx, k, notTaken)
				if !assertNoError(t, err) {
					return
				}
				assertNoError(t, cl.Release(ctx))
			}
		})
	}
	wg.Wait()
	requireNothingHeld(t, store, c)
	requireTablesGivenBack(t, c)
}

// requireTablesGivenBack checks that every shard of c has shrunk its table
// back to the minimum.
func requireTablesGivenBack(t *testing.T, c *claimer) {
	t.Helper()
	for i := range c.shards {
		require.LessOrEqual(t, c.shards[i].keys.Slots(), keyqueue.MinSlots, "shard %d gave its table back", i)
	}
}

// Keys held at once grow the claimer's table; once released, every shard
// gives its slots back.
func TestClaimerGivesItsTableBack(t *testing.T) {
	t.Parallel()
	store, c, _ := newClaimer(t, lockstore.MemoryConfig{})
	ctx := context.Background()
	const n = 5000
	claims := make([]*hold, 0, n)
	for i := range n {
		cl, err := c.Claim(ctx, key(fmt.Sprintf("held-%d", i)), notTaken)
		require.NoError(t, err)
		claims = append(claims, cl)
	}
	require.Equal(t, n, c.len())
	slots := 0
	for i := range c.shards {
		slots += c.shards[i].keys.Slots()
	}
	require.Greater(t, slots, numShards*keyqueue.MinSlots, "the table grew")
	for _, cl := range claims {
		require.NoError(t, cl.Release(ctx))
	}
	requireNothingHeld(t, store, c)
	requireTablesGivenBack(t, c)
}

// assertNoError reports err from any goroutine without stopping it.
func assertNoError(t *testing.T, err error) bool {
	t.Helper()
	if err != nil {
		t.Errorf("unexpected error: %v", err)
		return false
	}
	return true
}

// lostCause records the cause a watched claim's loss is reported with.
type lostCause struct {
	ch chan error
}

func newLostCause() *lostCause { return &lostCause{ch: make(chan error, 1)} }

func (l *lostCause) cancel(err error) { l.ch <- err }

func (l *lostCause) require(t *testing.T) {
	t.Helper()
	select {
	case err := <-l.ch:
		require.ErrorIs(t, err, lockstore.ErrLockLost)
		require.Contains(t, err.Error(), "staff.email/ann@x.org")
	case <-time.After(waitFor):
		t.Fatal("the loss of the claim was not reported")
	}
}

// watchedClaims returns the number of claims of c with a function to call
// on a loss.
func watchedClaims(c *claimer) int {
	n := 0
	for i := range c.shards {
		sh := &c.shards[i]
		sh.mu.Lock()
		for st := range sh.keys.All {
			if st.holder != nil && st.holder.onLost != nil {
				n++
			}
		}
		sh.mu.Unlock()
	}
	return n
}

func TestWatchLost(t *testing.T) {
	t.Parallel()
	const ttl = time.Minute
	ctx := context.Background()
	k := key("ann@x.org")

	t.Run("reported at once to a claimant granted next", func(t *testing.T) {
		t.Parallel()
		clock := lockstoretest.NewClock(time.Unix(1_700_000_000, 0))
		store := newMemory(t, lockstore.MemoryConfig{TTL: ttl, Clock: clock})
		// Locks that never report their loss themselves (Lost is nil), so
		// that the next claimant's grant is what reports it.
		c := makeClaimer(silentLocker{store})
		holder, err := c.Claim(ctx, k, notTaken)
		require.NoError(t, err)
		lost := newLostCause()
		c.watchLost(holder, lost.cancel)
		next := startClaim(ctx, c, k, notTaken)
		requireStoreWaiting(t, store, k, 1)
		clock.Advance(ttl)
		r := receive(t, next)
		require.NoError(t, r.err)
		lost.require(t)
		require.Zero(t, watchedClaims(c))
		require.ErrorIs(t, holder.Release(ctx), lockstore.ErrLockLost)
		require.NoError(t, r.claim.Release(ctx))
		requireNothingHeld(t, store, c)
	})

	t.Run("reported by the store as it ends the lock", func(t *testing.T) {
		t.Parallel()
		store, c, _ := newClaimer(t, lockstore.MemoryConfig{})
		holder, err := c.Claim(ctx, k, notTaken)
		require.NoError(t, err)
		lost := newLostCause()
		c.watchLost(holder, lost.cancel)
		require.NoError(t, store.Reset(ctx))
		// The memory store runs the AfterLost functions before Reset
		// returns: the loss is already reported, no interval later.
		require.Len(t, lost.ch, 1, "the loss is reported before Reset returns")
		lost.require(t)
		require.ErrorIs(t, holder.Release(ctx), lockstore.ErrLockLost)
		require.Zero(t, watchedClaims(c), "nothing is watched once the claim is released")
		requireNothingHeld(t, store, c)
	})

	t.Run("watched after the loss: reported", func(t *testing.T) {
		t.Parallel()
		store, c, _ := newClaimer(t, lockstore.MemoryConfig{})
		holder, err := c.Claim(ctx, k, notTaken)
		require.NoError(t, err)
		require.NoError(t, store.Reset(ctx))
		lost := newLostCause()
		c.watchLost(holder, lost.cancel)
		lost.require(t)
		require.ErrorIs(t, holder.Release(ctx), lockstore.ErrLockLost)
		requireNothingHeld(t, store, c)
	})

	t.Run("never reported after release", func(t *testing.T) {
		t.Parallel()
		store, c, _ := newClaimer(t, lockstore.MemoryConfig{})
		var wg sync.WaitGroup
		var reported atomic.Int64
		for i := range 50 {
			wg.Go(func() {
				cl, err := c.Claim(ctx, key(fmt.Sprintf("v%d@x.org", i)), notTaken)
				if !assertNoError(t, err) {
					return
				}
				c.watchLost(cl, func(error) { reported.Add(1) })
				assertNoError(t, cl.Release(ctx))
			})
		}
		wg.Wait()
		require.NoError(t, store.Reset(ctx))
		require.Zero(t, watchedClaims(c))
		require.Zero(t, reported.Load())
		requireNothingHeld(t, store, c)
	})
}
