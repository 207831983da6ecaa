package middleware

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

type ctxKey string

// newReleaseCtx returns a release context of a cancelled parent carrying a
// value, ending after timeout, ended when the test ends.
func newReleaseCtx(t *testing.T, timeout time.Duration) *releaseCtx {
	t.Helper()
	parent, cancel := context.WithCancel(context.WithValue(context.Background(), ctxKey("k"), "v"))
	cancel() // the sender went away: it must not reach the after hooks
	c := &releaseCtx{}
	before := time.Now()
	c.init(parent, timeout)
	deadline, ok := c.Deadline()
	require.True(t, ok)
	require.False(t, deadline.Before(before.Add(timeout)), "deadline %v is before start + %v", deadline, timeout)
	require.False(t, deadline.After(time.Now().Add(timeout)), "deadline %v is after now + %v", deadline, timeout)
	t.Cleanup(c.end)
	return c
}

// requireClosed fails the test unless ch closes in time.
func requireClosed(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(10 * time.Second):
		t.Fatalf("%s did not close", what)
	}
}

func (c *releaseCtx) isArmed() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.armed != nil
}

func TestReleaseCtxArmsOnlyWhenWaitedOn(t *testing.T) {
	t.Parallel()
	c := newReleaseCtx(t, time.Hour)
	require.Equal(t, "v", c.Value(ctxKey("k")), "the command's values carry over")
	_, _ = c.Deadline()
	require.NoError(t, context.Cause(context.WithValue(c, ctxKey("x"), 1)), "Cause before the deadline")
	require.True(t, c.isArmed(), "Cause asks Err, which arms")

	c2 := newReleaseCtx(t, time.Hour)
	_ = c2.Value(ctxKey("k"))
	require.False(t, c2.isArmed(), "Deadline and Value make no timer")
	require.NoError(t, c2.Err(), "the parent's cancellation does not reach it")
	require.True(t, c2.isArmed())
	select {
	case <-c2.Done():
		t.Fatal("done before its deadline")
	default:
	}
}

func TestReleaseCtxDoneClosesAtDeadline(t *testing.T) {
	t.Parallel()
	const timeout = 30 * time.Millisecond
	c := newReleaseCtx(t, timeout)
	deadline, _ := c.Deadline()
	requireClosed(t, c.Done(), "Done at the deadline")
	require.False(t, time.Now().Before(deadline), "closed before the deadline")
	require.ErrorIs(t, c.Err(), context.DeadlineExceeded)
	require.ErrorIs(t, context.Cause(c), context.DeadlineExceeded)
	c.end()
	require.ErrorIs(t, c.Err(), context.DeadlineExceeded, "the first reason stays")
}

func TestReleaseCtxDeadlinePassedBeforeArming(t *testing.T) {
	t.Parallel()
	c := newReleaseCtx(t, time.Nanosecond)
	deadline, _ := c.Deadline()
	for time.Now().Before(deadline) {
		// A nanosecond: no measurable wait.
	}
	require.False(t, c.isArmed())
	require.ErrorIs(t, c.Err(), context.DeadlineExceeded)
	select {
	case <-c.Done():
	default:
		t.Fatal("Done is open past the deadline")
	}
}

func TestReleaseCtxEndCancels(t *testing.T) {
	t.Parallel()
	t.Run("armed: the timer is stopped and Done closes", func(t *testing.T) {
		t.Parallel()
		c := newReleaseCtx(t, time.Hour)
		done := c.Done()
		child, cancelChild := context.WithCancel(c)
		defer cancelChild()
		afterFuncRan := make(chan struct{})
		context.AfterFunc(c, func() { close(afterFuncRan) })
		c.end()
		requireClosed(t, done, "Done")
		require.ErrorIs(t, c.Err(), context.Canceled)
		requireClosed(t, child.Done(), "a derived context's Done")
		require.ErrorIs(t, context.Cause(child), context.Canceled)
		requireClosed(t, afterFuncRan, "an AfterFunc")
	})
	t.Run("never armed: no timer, and a late Done is closed", func(t *testing.T) {
		t.Parallel()
		c := newReleaseCtx(t, time.Hour)
		c.end()
		require.False(t, c.isArmed())
		require.ErrorIs(t, c.Err(), context.Canceled)
		requireClosed(t, c.Done(), "Done")
	})
}

// Hooks may hand the context to goroutines: arming, reading and ending race
// under -race.
func TestReleaseCtxConcurrent(t *testing.T) {
	t.Parallel()
	for range 50 {
		c := newReleaseCtx(t, time.Hour)
		var wg sync.WaitGroup
		for g := range 8 {
			wg.Go(func() {
				switch g % 3 {
				case 0:
					<-c.Done()
				case 1:
					for c.Err() == nil {
						if c.Value(ctxKey("k")) != "v" {
							t.Error("lost the value")
							return
						}
					}
				default:
					child, cancel := context.WithCancel(c)
					<-child.Done()
					cancel()
				}
			})
		}
		c.end()
		wg.Wait()
		if err := c.Err(); !errors.Is(err, context.Canceled) {
			t.Fatalf("Err = %v, want canceled", err)
		}
	}
}
