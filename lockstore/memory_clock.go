package lockstore

import "time"

// Clock is the time source of a memory store: it stamps grants and runs the
// timers that end leases. The default is the system clock; tests inject a
// fake one they advance by hand (lockstoretest.Clock), so that a lease runs
// out exactly when the test says and never because a machine was slow.
type Clock interface {
	// Now returns the current time.
	Now() time.Time
	// AfterFunc calls f, in its own goroutine or in the goroutine that
	// advances the clock, once d has passed, unless the returned Timer is
	// stopped first. f must not be called from inside AfterFunc itself.
	AfterFunc(d time.Duration, f func()) Timer
}

// Timer is a pending call scheduled with Clock.AfterFunc. *time.Timer
// implements it.
type Timer interface {
	// Stop prevents the call from running. It returns false when the call
	// has already run or started, or the timer was already stopped.
	Stop() bool
}

// systemClock is the Clock of the running machine.
type systemClock struct{}

func (systemClock) Now() time.Time { return time.Now() }

func (systemClock) AfterFunc(d time.Duration, f func()) Timer { return time.AfterFunc(d, f) }
