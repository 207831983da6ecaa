package afterlost

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

const waitFor = 10 * time.Second

// chanLock is a lock of another package: a Lost channel and nothing more.
type chanLock struct{ lost chan struct{} }

func (l chanLock) Lost() <-chan struct{} { return l.lost }

// notifierLock is a lock of another package with its own AfterLost.
type notifierLock struct {
	chanLock
	mu sync.Mutex
	fs []func()
}

func (l *notifierLock) AfterLost(f func()) func() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	i := len(l.fs)
	l.fs = append(l.fs, f)
	return func() bool {
		l.mu.Lock()
		defer l.mu.Unlock()
		ok := l.fs[i] != nil
		l.fs[i] = nil
		return ok
	}
}

func (l *notifierLock) lose() {
	l.mu.Lock()
	fs := l.fs
	l.fs = nil
	l.mu.Unlock()
	for _, f := range fs {
		if f != nil {
			f()
		}
	}
}

type counter struct {
	n   atomic.Int32
	ran chan struct{}
}

func newCounter() *counter { return &counter{ran: make(chan struct{})} }

func (c *counter) LockLost() {
	if c.n.Add(1) == 1 {
		close(c.ran)
	}
}

func (c *counter) await(t *testing.T) {
	t.Helper()
	select {
	case <-c.ran:
	case <-time.After(waitFor):
		t.Fatal("the target was not told")
	}
}

func TestFallbackGoroutine(t *testing.T) {
	t.Parallel()
	t.Run("lost", func(t *testing.T) {
		t.Parallel()
		l := chanLock{make(chan struct{})}
		var n Node
		c := newCounter()
		Watch(l, &n, c)
		close(l.lost)
		c.await(t)
		require.False(t, n.Stop(), "stop after the loss")
		require.EqualValues(t, 1, c.n.Load())
	})
	t.Run("stopped", func(t *testing.T) {
		t.Parallel()
		l := chanLock{make(chan struct{})}
		var n Node
		c := newCounter()
		Watch(l, &n, c)
		require.True(t, n.Stop(), "stop before the loss")
		require.False(t, n.Stop(), "a second stop")
		close(l.lost)
		// goleak (TestMain) checks that the goroutine has ended.
		require.Zero(t, c.n.Load())
	})
	t.Run("never lost", func(t *testing.T) {
		t.Parallel()
		var n Node
		c := newCounter()
		Watch(chanLock{}, &n, c)
		require.True(t, n.Stop())
		require.Zero(t, c.n.Load())
	})
}

func TestThirdPartyNotifier(t *testing.T) {
	t.Parallel()
	l := &notifierLock{chanLock: chanLock{make(chan struct{})}}
	var kept, stopped Node
	ck, cs := newCounter(), newCounter()
	Watch(l, &kept, ck)
	Watch(l, &stopped, cs)
	require.True(t, stopped.Stop())
	require.Nil(t, l.fs[1], "Stop stops the store's own registration")
	l.lose()
	ck.await(t)
	require.False(t, kept.Stop())
	require.Zero(t, cs.n.Load())
}

func TestListFiresOnceAndPrunes(t *testing.T) {
	t.Parallel()
	var l List
	nodes := make([]Node, 100)
	cs := make([]*counter, len(nodes))
	for i := range nodes {
		cs[i] = newCounter()
		nodes[i].target = cs[i]
		l.Push(&nodes[i])
		if i%2 == 1 {
			require.True(t, nodes[i].Stop())
		}
	}
	require.LessOrEqual(t, l.Len(), 2*50+16, "stopped nodes are pruned as the list grows")
	chain := l.Take()
	require.Zero(t, l.Len())
	chain.Fire()
	chain.Fire() // a second fire of the same nodes tells nobody again
	for i, c := range cs {
		if i%2 == 1 {
			require.Zero(t, c.n.Load(), "node %d was stopped", i)
		} else {
			require.EqualValues(t, 1, c.n.Load(), "node %d", i)
		}
	}
}

// TestStopRacesFire: from many goroutines, each node is either stopped
// (Stop true) or fired, never both, never twice.
func TestStopRacesFire(t *testing.T) {
	t.Parallel()
	const n = 2000
	nodes := make([]Node, n)
	cs := make([]*counter, n)
	stopped := make([]bool, n)
	var l List
	for i := range nodes {
		cs[i] = newCounter()
		nodes[i].target = cs[i]
		l.Push(&nodes[i])
	}
	chain := l.Take()
	var wg sync.WaitGroup
	wg.Go(chain.Fire)
	for w := range 8 {
		wg.Go(func() {
			for i := w; i < n; i += 8 {
				stopped[i] = nodes[i].Stop()
			}
		})
	}
	wg.Wait()
	for i := range nodes {
		if stopped[i] {
			require.Zero(t, cs[i].n.Load(), "node %d", i)
		} else {
			require.EqualValues(t, 1, cs[i].n.Load(), "node %d", i)
		}
	}
}

func TestFireLater(t *testing.T) {
	t.Parallel()
	var n Node
	c := newCounter()
	n.target = c
	n.FireLater()
	c.await(t)
	require.False(t, n.Stop())
}
