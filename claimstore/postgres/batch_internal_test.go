package postgres

import (
	"context"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// gatedRun is a batch function that records its batches and blocks each
// run until release lets it go.
type gatedRun struct {
	mu      sync.Mutex
	batches [][]string
	started chan struct{}
	release chan struct{}
}

func newGatedRun() *gatedRun {
	return &gatedRun{started: make(chan struct{}, 100), release: make(chan struct{})}
}

func (g *gatedRun) run(ctx context.Context, reqs []string) ([]string, error) {
	g.mu.Lock()
	g.batches = append(g.batches, append([]string(nil), reqs...))
	g.mu.Unlock()
	g.started <- struct{}{}
	select {
	case <-g.release:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	out := make([]string, len(reqs))
	for i, r := range reqs {
		out[i] = "answer " + r
	}
	return out, nil
}

// waitQueued waits until n calls are queued behind the running batch.
func waitQueued[Req, Res any](t *testing.T, b *batcher[Req, Res], n int) {
	t.Helper()
	require.Eventually(t, func() bool {
		b.mu.Lock()
		defer b.mu.Unlock()
		queued := 0
		for _, bt := range b.pending {
			queued += len(bt.calls)
		}
		return queued == n
	}, 10*time.Second, time.Millisecond)
}

func TestBatcherCoalescesAndSplitsDuplicates(t *testing.T) {
	t.Parallel()
	g := newGatedRun()
	b := newBatcher(3, 1, func(s string) string { return s[:1] }, g.run)
	ctx := t.Context()
	var wg sync.WaitGroup
	answers := make([]string, 6)
	do := func(i int, req string) {
		wg.Go(func() {
			res, err := b.do(ctx, req)
			require.NoError(t, err)
			answers[i] = res
		})
	}
	do(0, "a0")
	<-g.started // the first call runs at once, alone
	// While it runs: three distinct keys fill a batch of 3, a duplicate key
	// and a fourth distinct one go to the next.
	for i, req := range []string{"b1", "c2", "b3", "d4", "e5"} {
		do(i+1, req)
		waitQueued(t, b, i+1)
	}
	close(g.release)
	wg.Wait()
	for i, req := range []string{"a0", "b1", "c2", "b3", "d4", "e5"} {
		require.Equal(t, "answer "+req, answers[i])
	}
	require.Equal(t, [][]string{{"a0"}, {"b1", "c2", "d4"}, {"b3", "e5"}}, g.batches)
	require.Zero(t, b.running, "idle once every batch ran")
}

// runningBatcher returns a batcher of lanes lanes on a gatedRun, with a
// call "first" in each lane, running; wg waits for them.
func runningBatcher(t *testing.T, lanes int) (*gatedRun, *batcher[string, string], *sync.WaitGroup) {
	g := newGatedRun()
	b := newBatcher(10, lanes, nil, g.run)
	wg := new(sync.WaitGroup)
	for range lanes {
		wg.Go(func() {
			_, err := b.do(t.Context(), "first")
			require.NoError(t, err)
		})
		<-g.started
	}
	return g, b, wg
}

func TestBatcherLanes(t *testing.T) {
	t.Parallel()
	g, b, wg := runningBatcher(t, 2) // two calls run at once, alone
	wg.Go(func() {
		res, err := b.do(t.Context(), "third")
		require.NoError(t, err)
		require.Equal(t, "answer third", res)
	})
	waitQueued(t, b, 1) // the third waits for a lane
	close(g.release)
	wg.Wait()
	require.Equal(t, [][]string{{"first"}, {"first"}, {"third"}}, g.batches)
	require.Zero(t, b.running)
}

func TestBatcherCallerLeavesBeforeItsBatchStarts(t *testing.T) {
	t.Parallel()
	g, b, wg := runningBatcher(t, 1)
	ctx := t.Context()
	gone, cancel := context.WithCancel(ctx)
	left := make(chan error, 1)
	go func() { _, err := b.do(gone, "gone"); left <- err }()
	waitQueued(t, b, 1)
	cancel()
	require.ErrorIs(t, <-left, context.Canceled)
	waitQueued(t, b, 0)
	wg.Go(func() {
		res, err := b.do(ctx, "next")
		require.NoError(t, err)
		require.Equal(t, "answer next", res)
	})
	waitQueued(t, b, 1)
	close(g.release)
	wg.Wait()
	require.Equal(t, [][]string{{"first"}, {"next"}}, g.batches, "the call that left was never sent")
}

func TestBatcherBatchEndsWhenEveryCallerIsGone(t *testing.T) {
	t.Parallel()
	g, b, wg := runningBatcher(t, 1)
	ctx := t.Context()
	// Two callers queue; the batch they share starts, then both go away.
	ctxs := make([]context.CancelFunc, 2)
	errs := make(chan error, 2)
	for i := range ctxs {
		c, cancel := context.WithCancel(ctx)
		ctxs[i] = cancel
		go func() { _, err := b.do(c, strconv.Itoa(i)); errs <- err }()
		waitQueued(t, b, i+1)
	}
	g.release <- struct{}{} // the first batch ends; the second starts
	<-g.started
	wg.Wait()
	for _, cancel := range ctxs {
		cancel()
	}
	for range ctxs {
		require.ErrorIs(t, <-errs, context.Canceled)
	}
	// The second batch's run saw its ctx end (else release would be
	// needed): the batcher is idle again.
	require.Eventually(t, func() bool {
		b.mu.Lock()
		defer b.mu.Unlock()
		return b.running == 0
	}, 10*time.Second, time.Millisecond)
}
