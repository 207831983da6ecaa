package testwait_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/claimbus/claimbus/internal/testwait"
)

// recorder is a testing.TB that records a Fatalf instead of ending the
// test, as FailNow would.
type recorder struct {
	testing.TB
	failed string
}

func (r *recorder) Helper() {}

func (r *recorder) Fatalf(format string, args ...any) { r.failed = fmt.Sprintf(format, args...) }

func TestUntilReturnsOnceTheConditionHolds(t *testing.T) {
	t.Parallel()
	calls := 0
	rec := &recorder{TB: t}
	testwait.Until(rec, time.Minute, time.Millisecond, func() bool { calls++; return calls == 3 }, "three calls")
	require.Empty(t, rec.failed)
	require.Equal(t, 3, calls, "cond is called until it holds, then no more")
}

func TestUntilFailsAfterTheTimeout(t *testing.T) {
	t.Parallel()
	rec := &recorder{TB: t}
	testwait.Until(rec, 20*time.Millisecond, time.Millisecond, func() bool { return rec.failed != "" }, "the %s", "impossible")
	require.Equal(t, "timed out after 20ms waiting until the impossible", rec.failed)
}

func TestRecvReturnsTheValue(t *testing.T) {
	t.Parallel()
	ch := make(chan int, 1)
	ch <- 7
	rec := &recorder{TB: t}
	require.Equal(t, 7, testwait.Recv(rec, ch, time.Minute, "a value"))
	require.Empty(t, rec.failed)
}

func TestRecvFailsAfterTheTimeout(t *testing.T) {
	t.Parallel()
	rec := &recorder{TB: t}
	require.Zero(t, testwait.Recv(rec, make(chan int), 20*time.Millisecond, "the %s", "answer"))
	require.Equal(t, "timed out after 20ms waiting for the answer", rec.failed)
}
