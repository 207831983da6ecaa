// Package testwait holds the waits of this module's tests: Recv, a
// receive bounded by a timeout, and Until, the one polling helper for
// conditions that must run on the test's goroutine: require.Eventually
// runs its condition on a goroutine of its own, so a condition that calls
// t.Fatalf or require (directly or through a helper that asserts on t)
// would fail the test from the wrong goroutine there. Conditions that
// assert nothing use require.Eventually instead.
package testwait

import (
	"fmt"
	"testing"
	"time"
)

// Until calls cond on the test's goroutine, every interval, until it
// returns true, and fails t after timeout with what it waited for.
func Until(t testing.TB, timeout, interval time.Duration, cond func() bool, format string, args ...any) {
	t.Helper()
	end := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(end) {
			t.Fatalf("timed out after %v waiting until %s", timeout, fmt.Sprintf(format, args...))
		}
		time.Sleep(interval) //nolint:forbidigo // the poll itself: cond runs on the test's goroutine (see the package doc)
	}
}

// Recv receives from ch, or fails t after timeout with what it waited for.
func Recv[T any](t testing.TB, ch <-chan T, timeout time.Duration, format string, args ...any) T {
	t.Helper()
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	select {
	case v := <-ch:
		return v
	case <-timer.C:
		t.Fatalf("timed out after %v waiting for %s", timeout, fmt.Sprintf(format, args...))
		var zero T
		return zero
	}
}
