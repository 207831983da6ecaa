package uniqueness

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// waiting returns how many lookups wait for the next call.
func (b *batcher) waiting() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.next == nil {
		return 0
	}
	return len(b.next.values)
}

// lookupResult is what a lookup started with startLookup ends with.
type lookupResult struct {
	taken bool
	err   error
}

// startLookup looks v up on b in a goroutine and returns where its result
// arrives.
func startLookup(ctx context.Context, b *batcher, v string) <-chan lookupResult {
	ch := make(chan lookupResult, 1)
	go func() {
		taken, err := b.lookup(ctx, v)
		ch <- lookupResult{taken, err}
	}()
	return ch
}

// Lookups arriving while a call runs wait and go together in the next
// call; each gets its own answer.
func TestBatchedCoalescesWaitingLookups(t *testing.T) {
	t.Parallel()
	taken := map[string]bool{"b@x.org": true, "d@x.org": true}
	started := make(chan []string, 10)
	release := make(chan struct{})
	b := &batcher{f: func(ctx context.Context, values []string) ([]bool, error) {
		started <- append([]string(nil), values...)
		<-release
		out := make([]bool, len(values))
		for i, v := range values {
			out[i] = taken[v]
		}
		return out, nil
	}}
	call := func() []string {
		select {
		case v := <-started:
			return v
		case <-time.After(waitFor):
			t.Fatal("no call started")
			return nil
		}
	}

	first := startLookup(context.Background(), b, "a@x.org")
	require.Equal(t, []string{"a@x.org"}, call(), "an uncontended lookup is sent at once, alone")
	rest := map[string]<-chan lookupResult{}
	for _, v := range []string{"b@x.org", "c@x.org", "d@x.org"} {
		rest[v] = startLookup(context.Background(), b, v)
	}
	require.Eventually(t, func() bool { return b.waiting() == 3 }, waitFor, time.Millisecond)
	require.Empty(t, started, "no second call while the first runs")
	release <- struct{}{}
	require.Equal(t, lookupResult{false, nil}, <-first)
	require.ElementsMatch(t, []string{"b@x.org", "c@x.org", "d@x.org"}, call(), "the waiting lookups go in one call")
	release <- struct{}{}
	for v, ch := range rest {
		r := <-ch
		require.NoError(t, r.err)
		require.Equal(t, taken[v], r.taken, v)
	}
	require.Zero(t, b.waiting())
}

// A waiting lookup whose ctx ends leaves with ctx's error; the call still
// answers the others.
func TestBatchedWaiterLeavesOnItsContext(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	calls := make(chan []string, 10)
	b := &batcher{f: func(ctx context.Context, values []string) ([]bool, error) {
		calls <- append([]string(nil), values...)
		<-release
		return []bool{true, true, true}[:len(values)], nil
	}}
	ctx := context.Background()
	first := startLookup(ctx, b, "a@x.org")
	<-calls
	wctx, cancel := context.WithCancel(ctx)
	leaving := startLookup(wctx, b, "c@x.org")
	staying := startLookup(ctx, b, "b@x.org")
	require.Eventually(t, func() bool { return b.waiting() == 2 }, waitFor, time.Millisecond)
	cancel()
	require.ErrorIs(t, (<-leaving).err, context.Canceled)
	release <- struct{}{}
	require.NoError(t, (<-first).err)
	require.ElementsMatch(t, []string{"c@x.org", "b@x.org"}, <-calls, "the call still carries the value of the one that left")
	release <- struct{}{}
	r := <-staying
	require.NoError(t, r.err)
	require.True(t, r.taken)
}
