package lockstoretest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/claimbus/claimbus/internal/testwait"
	"github.com/claimbus/claimbus/lockstore"
)

// Timeout bounds every wait of the suite: for a waiter to be queued or
// granted, for a Lost channel to close. It is generous because a store may
// poll a server; a conforming store never comes near it.
const Timeout = 10 * time.Second

// WaitCounter is implemented by stores that can tell how many Lock calls on
// them wait for a key now (not counting its holder). The suite needs it to
// queue waiters in a known order without sleeping.
type WaitCounter interface {
	Waiting(key lockstore.Key) int
}

// runID keeps the keys of one test binary apart from those of another
// running at the same time against the same database.
var runID = func() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}()

var keySeq atomic.Int64

// bundle is the state of one subtest: a fresh store, the test's context,
// and the goroutines it started.
type bundle struct {
	t     *testing.T
	store lockstore.Store
	ctx   context.Context
	wg    sync.WaitGroup
}

func setup(t *testing.T, store lockstore.Store) *bundle {
	t.Helper()
	require.NotNil(t, store, "the store constructor returned nil")
	ctx, cancel := context.WithTimeout(t.Context(), 4*Timeout)
	b := &bundle{t: t, store: store, ctx: ctx}
	// Close first, so that goroutines still waiting on the store return,
	// then wait for them.
	t.Cleanup(func() {
		_ = store.Close()
		cancel()
		b.wg.Wait()
	})
	return b
}

// key returns a key no other test uses.
func (b *bundle) key() lockstore.Key {
	name := b.t.Name()
	if len(name) > 200 {
		name = name[len(name)-200:]
	}
	return lockstore.Key{Namespace: "lockstoretest", ID: fmt.Sprintf("%s/%s/%d", runID, name, keySeq.Add(1))}
}

// result is what a Lock call returned.
type result struct {
	lock lockstore.Lock
	err  error
}

// goLock calls Lock in a goroutine; its result arrives on the channel.
func (b *bundle) goLock(ctx context.Context, key lockstore.Key) <-chan result {
	ch := make(chan result, 1)
	b.wg.Add(1)
	go func() {
		defer b.wg.Done()
		l, err := b.store.Lock(ctx, key)
		ch <- result{l, err}
	}()
	return ch
}

// await returns the result of a goLock call, failing the test when none
// arrives within Timeout.
func (b *bundle) await(ch <-chan result, what string) result {
	b.t.Helper()
	return testwait.Recv(b.t, ch, Timeout, "%s: Lock to return", what)
}

// awaitLock is await for a call that must be granted.
func (b *bundle) awaitLock(ch <-chan result, what string) lockstore.Lock {
	b.t.Helper()
	r := b.await(ch, what)
	require.NoError(b.t, r.err, what)
	require.NotNil(b.t, r.lock, what)
	return r.lock
}

// requirePending fails when the goLock call already returned.
func (b *bundle) requirePending(ch <-chan result, what string) {
	b.t.Helper()
	select {
	case r := <-ch:
		b.t.Fatalf("%s: Lock returned (lock %v, err %v) while the key was still held", what, r.lock != nil, r.err)
	default:
	}
}

// waitQueued waits until n Lock calls wait for key.
func (b *bundle) waitQueued(key lockstore.Key, n int) {
	b.t.Helper()
	wc, ok := b.store.(WaitCounter)
	if !ok {
		b.t.Fatalf("lockstoretest: %T does not implement lockstoretest.WaitCounter (Waiting(lockstore.Key) int): "+
			"the suite needs it to queue waiters in a known order without sleeping", b.store)
	}
	require.Eventually(b.t, func() bool { return wc.Waiting(key) == n }, Timeout, time.Millisecond, "%d waiter(s) queued on %s", n, key)
}

// lockNow takes a free key with TryLock.
func (b *bundle) lockNow(key lockstore.Key) lockstore.Lock {
	b.t.Helper()
	l, err := b.store.TryLock(b.ctx, key)
	require.NoError(b.t, err, "TryLock %s", key)
	require.NotNil(b.t, l)
	return l
}

// requireFree checks that key can be taken now, and gives it back.
func (b *bundle) requireFree(key lockstore.Key) lockstore.Lock {
	b.t.Helper()
	l := b.lockNow(key)
	require.NoError(b.t, l.Release(b.ctx))
	return l
}

// requireLocked checks that TryLock on key fails with ErrLocked.
func (b *bundle) requireLocked(key lockstore.Key) {
	b.t.Helper()
	l, err := b.store.TryLock(b.ctx, key)
	require.ErrorIs(b.t, err, lockstore.ErrLocked, "TryLock %s while held", key)
	require.Nil(b.t, l)
}

// holder returns what Held lists for key now, and whether it lists it.
func (b *bundle) holder(key lockstore.Key) (lockstore.Holder, bool) {
	b.t.Helper()
	hs, err := b.store.Held(b.ctx)
	require.NoError(b.t, err)
	return findHolder(hs, key)
}

// requireClosed waits for ch to be closed, failing the test after Timeout.
func requireClosed(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	require.NotNil(t, ch, what)
	timer := time.NewTimer(Timeout)
	defer timer.Stop()
	select {
	case <-ch:
	case <-timer.C:
		t.Fatalf("%s: not closed within %s", what, Timeout)
	}
}

// requireOpen checks that ch is not closed now.
func requireOpen(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	require.NotNil(t, ch, what)
	select {
	case <-ch:
		t.Fatalf("%s: closed", what)
	default:
	}
}

// goTogether starts n goroutines running f(i), counted in owner (the
// subtest's, whose cleanup waits for it), and lets them all go at once.
// The returned channel is closed once every f has returned.
func goTogether(owner *sync.WaitGroup, n int, f func(i int)) <-chan struct{} {
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range n {
		wg.Add(1)
		owner.Add(1)
		go func() {
			defer owner.Done()
			defer wg.Done()
			<-start
			f(i)
		}()
	}
	done := make(chan struct{})
	owner.Add(1)
	go func() {
		defer owner.Done()
		wg.Wait()
		close(done)
	}()
	close(start)
	return done
}
