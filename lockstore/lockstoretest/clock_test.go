package lockstoretest_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/claimbus/claimbus/lockstore/lockstoretest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

var start = time.Date(2026, 5, 6, 7, 8, 9, 0, time.UTC)

func TestClockRunsTimersInOrderAtTheirTime(t *testing.T) {
	t.Parallel()
	c := lockstoretest.NewClock(start)
	require.True(t, c.Now().Equal(start))
	var fired []string
	record := func(name string) func() {
		return func() { fired = append(fired, name+"@"+c.Now().Sub(start).String()) }
	}
	c.AfterFunc(3*time.Second, record("c"))
	c.AfterFunc(time.Second, record("a"))
	c.AfterFunc(3*time.Second, record("d")) // same time as c: scheduled later, runs later
	c.AfterFunc(2*time.Second, func() {
		record("b")()
		c.AfterFunc(500*time.Millisecond, record("b+")) // due within this Advance
		c.AfterFunc(time.Hour, record("late"))
	})
	require.Equal(t, 4, c.Pending())

	c.Advance(999 * time.Millisecond)
	require.Empty(t, fired)
	c.Advance(5 * time.Second)
	require.Equal(t, []string{"a@1s", "b@2s", "b+@2.5s", "c@3s", "d@3s"}, fired)
	require.True(t, c.Now().Equal(start.Add(5999*time.Millisecond)), "Advance ends at its target")
	require.Equal(t, 1, c.Pending())
}

func TestClockStop(t *testing.T) {
	t.Parallel()
	c := lockstoretest.NewClock(start)
	ran := 0
	stopped := c.AfterFunc(time.Second, func() { ran++ })
	kept := c.AfterFunc(time.Second, func() { ran++ })
	require.True(t, stopped.Stop())
	require.False(t, stopped.Stop(), "second Stop")
	c.Advance(time.Second)
	require.Equal(t, 1, ran)
	require.False(t, kept.Stop(), "Stop after the call ran")
	require.Zero(t, c.Pending())
}

func TestClockZeroDelayRunsAtNextAdvance(t *testing.T) {
	t.Parallel()
	c := lockstoretest.NewClock(start)
	ran := false
	c.AfterFunc(0, func() { ran = true })
	require.False(t, ran, "AfterFunc never calls f itself")
	c.Advance(0)
	require.True(t, ran)
}
