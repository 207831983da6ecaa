package storm

import (
	"bytes"
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/claimbus/claimbus/example_app/internal/storm/stormtest"
)

// fakeClock is a clock whose sleeps move it on at once.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (f *fakeClock) clock() clock {
	return clock{
		now: func() time.Time { f.mu.Lock(); defer f.mu.Unlock(); return f.now },
		sleep: func(ctx context.Context, d time.Duration) bool {
			f.mu.Lock()
			defer f.mu.Unlock()
			if d > 0 {
				f.now = f.now.Add(d)
			}
			return ctx.Err() == nil
		},
	}
}

func TestDue(t *testing.T) {
	t.Parallel()
	require.Equal(t, time.Duration(0), due(0, 1000))
	require.Equal(t, time.Millisecond, due(1, 1000))
	require.Equal(t, 20*time.Second, due(20000, 1000))
	require.Equal(t, 3*time.Second/7, due(3, 7))
	require.Equal(t, 2500*time.Millisecond, due(5, 2))
}

// The open loop starts each call at its due time although none of the
// calls before it has returned; past maxInFlight running, it drops.
func TestScheduleOpenLoop(t *testing.T) {
	t.Parallel()
	fc := &fakeClock{now: time.Unix(1000, 0)}
	start := fc.now
	const n, rate, limit = 50, 100.0, 30
	release := make(chan struct{})
	var mu sync.Mutex
	started := map[int]time.Time{}
	var dropped []int
	reached := schedule(t.Context(), n, rate, limit, fc.clock(), func(i int, at time.Time) {
		mu.Lock()
		started[i] = at
		mu.Unlock()
		<-release // none returns before all are due
	}, func(i int) {
		if dropped = append(dropped, i); len(dropped) == n-limit {
			close(release)
		}
	})
	require.Equal(t, n, reached)
	require.Len(t, started, limit, "the first %d start, none having returned", limit)
	for i := range limit {
		require.Equal(t, start.Add(time.Duration(i)*10*time.Millisecond), started[i], "call %d starts at its due time", i)
	}
	want := make([]int, 0, n-limit)
	for i := limit; i < n; i++ {
		want = append(want, i)
	}
	require.Equal(t, want, dropped, "the calls due while %d ran are dropped", limit)
	require.Equal(t, start.Add(490*time.Millisecond), fc.now, "the last is due at 49/100 s")
}

// A call that has not returned does not delay the next: on the wall
// clock, 20 calls at 1000 a second all start while none of them has
// returned.
func TestScheduleWallClock(t *testing.T) {
	t.Parallel()
	var started atomic.Int64
	release := make(chan struct{})
	reachedc := make(chan int, 1)
	go func() {
		reachedc <- schedule(t.Context(), 20, 1000, 100, wallClock, func(int, time.Time) {
			started.Add(1)
			<-release
		}, func(int) { t.Error("dropped") })
	}()
	require.Eventually(t, func() bool { return started.Load() == 20 }, 5*time.Second, time.Millisecond, "all start, none having returned")
	close(release)
	reached := <-reachedc
	require.Equal(t, 20, reached)

	// An ended context stops it before the first.
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	reached = schedule(ctx, 20, 1000, 100, wallClock, func(int, time.Time) { t.Error("called") }, func(int) { t.Error("dropped") })
	require.Zero(t, reached)
}

func TestOpenRequests(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		rate          float64
		d             time.Duration
		dup           float64
		requests, ems int
	}{
		{1000, 20 * time.Second, 0.9, 20000, 2000},
		{300, 20 * time.Second, 0.9, 6000, 600},
		{2.5, time.Second, 0.9, 3, 1}, // 2.5 rounds to 3 requests (half away from zero); 0.3 addresses to at least 1
		{100, time.Second, 0, 100, 100},
		{0.1, time.Second, 0.5, 1, 1},
	} {
		requests, emails := openRequests(tt.rate, tt.d, tt.dup)
		require.Equal(t, tt.requests, requests, "%+v", tt)
		require.Equal(t, tt.ems, emails, "%+v", tt)
	}
}

// The p99 of 1000 answers, 10 of them slow, is fast; with 11 slow it is
// slow: the bound of a search hinges on the 991st value.
func TestP99Tail(t *testing.T) {
	t.Parallel()
	lat := func(slow int) Latency {
		ds := make([]time.Duration, 1000)
		for i := range ds {
			ds[i] = time.Duration(1+i%7) * time.Millisecond
			if i < slow {
				ds[i] = 2 * time.Second
			}
		}
		return latencyOf(ds)
	}
	require.Equal(t, 7*time.Millisecond, lat(10).P99)
	require.Equal(t, 2*time.Second, lat(11).P99)
	require.Equal(t, 2*time.Second, lat(1).Max)
	require.Equal(t, 4*time.Millisecond, lat(0).P50)

	// within: p99 at most the bound and 99% answered, 5xx and dropped
	// being no answer.
	r := &Report{Requests: 1000, Status: map[int]int{201: 100, 409: 890}, Latency: Latency{P99: time.Second}}
	require.True(t, r.within(time.Second))
	require.False(t, r.within(time.Second-1))
	r.Status[503] = 10
	require.True(t, r.within(time.Second), "990 of 1000 answered")
	r.Status[409]--
	require.False(t, r.within(time.Second), "989 of 1000 answered")
}

// An open loop at 200 a second for 1 s against a fake node: 200 sent, 20
// addresses, all answered, checked, and printed as an open loop.
func TestRunOpenLoop(t *testing.T) {
	t.Parallel()
	store := stormtest.NewStore()
	url := stormtest.Start(t, &stormtest.Node{Name: "a", Store: store})
	cfg := Config{Targets: []string{url}, Rate: 200, Duration: time.Second, Dup: 0.9, MaxInFlight: 100, Timeout: 10 * time.Second, Seed: 3}
	r, err := Run(t.Context(), cfg)
	require.NoError(t, err)
	require.True(t, r.OK(), r.Problems)
	require.Equal(t, map[int]int{201: 20, 409: 180}, r.Status)
	require.Equal(t, 20, store.Len())
	require.Zero(t, r.Dropped)
	require.GreaterOrEqual(t, r.Elapsed, 995*time.Millisecond, "the last is due at 199/200 s")
	var out bytes.Buffer
	r.Write(&out)
	require.Contains(t, out.String(), "storm: open loop, 200 req/s for 1s: 200 POST /staff started on schedule to 1 node, 20 emails (90% duplicates), at most 100 in flight, timeout 10s, seed 3\n")
	require.Regexp(t, `(?m)^  dropped +0  due while 100 were in flight, not sent$`, out.String())
	require.Contains(t, out.String(), "200 req/s offered, 100% answered (not 5xx)")

	// A search with a bound no step meets stops after its first rate,
	// tried twice.
	cfg.FindRate, cfg.P99, cfg.RateStep = true, time.Nanosecond, 2
	s, err := RunSearch(t.Context(), cfg)
	require.NoError(t, err)
	require.True(t, s.OK())
	require.Len(t, s.Steps, 2)
	require.Equal(t, 200.0, s.Steps[1].Rate)
	require.NotEqual(t, s.Steps[0].Seed, s.Steps[1].Seed, "another set of emails")
	require.Zero(t, s.Sustained)
	out.Reset()
	s.Write(&out)
	require.Contains(t, out.String(), "sustained: none: the first rate, 200 req/s, was beyond p99 1ns")
}
