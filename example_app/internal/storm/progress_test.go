package storm

import (
	"bytes"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/claimbus/claimbus/example_app/internal/storm/stormtest"
)

// syncBuffer is a bytes.Buffer that signals each write.
type syncBuffer struct {
	mu     sync.Mutex
	buf    bytes.Buffer
	writes chan struct{}
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	n, err := b.buf.Write(p)
	b.mu.Unlock()
	select {
	case b.writes <- struct{}{}:
	default:
	}
	return n, err
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// Without a terminal, progress is a line per tick and a last one.
func TestProgressLines(t *testing.T) {
	t.Parallel()
	gate := make(chan struct{})
	arrived := make(chan struct{})
	target := stormtest.Start(t, &stormtest.Node{Name: "a", Gate: gate, Arrived: arrived})
	ticks := make(chan time.Time)
	stderr := &syncBuffer{writes: make(chan struct{}, 1)}
	cfg := testConfig(target)
	cfg.Requests, cfg.Emails, cfg.Concurrency = 10, 5, 2
	cfg.Progress, cfg.Stderr = ProgressAuto, stderr
	var every time.Duration
	cfg.newTicker = func(d time.Duration) (<-chan time.Time, func()) {
		every = d
		return ticks, func() {}
	}

	type ran struct {
		r   *Report
		err error
	}
	done := make(chan ran, 1)
	go func() {
		r, err := Run(t.Context(), cfg)
		done <- ran{r, err}
	}()
	<-arrived
	<-arrived
	ticks <- time.Now().Add(time.Second)
	<-stderr.writes
	require.Equal(t, "storm: 0/10 requests, 0 req/s\n", stderr.String())
	close(gate)
	go func() {
		for range arrived {
		}
	}()
	res := <-done
	close(arrived)
	require.Equal(t, linesEvery, every)
	require.NoError(t, res.err)
	require.True(t, res.r.OK(), res.r.Problems)
	require.Regexp(t, `^storm: 0/10 requests, 0 req/s
storm: 10/10 requests, done in [0-9.]+m?s, [0-9]+ req/s
storm: checking 5 emails on 1 node
$`, stderr.String())
}

// ProgressAuto is a bar on a terminal only; off is silent.
func TestProgressModes(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	require.Equal(t, ProgressLines, ProgressAuto.resolve(&buf))
	require.Equal(t, ProgressOff, Progress("").resolve(&buf))
	require.Equal(t, ProgressBar, ProgressBar.resolve(&buf))

	target := stormtest.Start(t, &stormtest.Node{Name: "a"})
	cfg := testConfig(target)
	cfg.Progress, cfg.Stderr = ProgressBar, &buf
	_, err := Run(t.Context(), cfg)
	require.NoError(t, err)
	require.Contains(t, buf.String(), "100/100")
	require.Contains(t, buf.String(), "storm")

	buf.Reset()
	cfg.Progress = ProgressOff
	_, err = Run(t.Context(), cfg)
	require.NoError(t, err)
	require.Empty(t, buf.String())
}
