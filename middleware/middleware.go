package middleware

import "context"

// Middleware runs hooks around each command handler.
//
// BeforeDispatch runs before the handler, in the order the middleware was
// given; it may halt the command (Pipeline.Halt), which skips the rest of
// the before hooks and the handler. After the handler succeeds,
// AfterDispatch runs; after it fails, panics, or a hook halts or panics,
// AfterFailure runs. After hooks run in reverse order, exactly once each,
// and only for middleware whose BeforeDispatch started (the halting one
// included), so a middleware releases exactly what its BeforeDispatch took.
//
// The ctx of BeforeDispatch is the command's context: it bounds waits, such
// as the wait for a claim. The ctx of the after hooks is not cancelled when
// the sender goes away; it ends after the runner's release timeout.
type Middleware interface {
	BeforeDispatch(ctx context.Context, p *Pipeline)
	AfterDispatch(ctx context.Context, p *Pipeline)
	AfterFailure(ctx context.Context, p *Pipeline)
}

// Stage is the place in a Runner's list of a middleware whose place
// matters: such a middleware has a method Stage() Stage. NewRunner refuses
// a list in which a stage comes after a later one.
type Stage int

const (
	// StageAnswer is a middleware that answers repeats from a store (the
	// idempotency package's): it comes before every claim, so that a
	// repeat gets the first run's answer, not the refusal of the claim
	// that run holds.
	StageAnswer Stage = iota + 1
	// StageClaim is a middleware that holds claims or locks while the
	// handler runs (the uniqueness package's, Lock).
	StageClaim
)

// staged is implemented by a middleware whose place in the list matters.
type staged interface {
	Stage() Stage
}

// Hooks is a Middleware made of functions; a nil function is a no-op. It
// suits small middleware that needs one hook or two. Each field is named
// after the hook that calls it, with "On" before it (a field cannot share
// its name with the method of the Middleware interface it serves).
type Hooks struct {
	// OnBeforeDispatch is called by BeforeDispatch.
	OnBeforeDispatch func(ctx context.Context, p *Pipeline)
	// OnAfterDispatch is called by AfterDispatch.
	OnAfterDispatch func(ctx context.Context, p *Pipeline)
	// OnAfterFailure is called by AfterFailure.
	OnAfterFailure func(ctx context.Context, p *Pipeline)
}

// BeforeDispatch calls h.OnBeforeDispatch.
func (h Hooks) BeforeDispatch(ctx context.Context, p *Pipeline) {
	if h.OnBeforeDispatch != nil {
		h.OnBeforeDispatch(ctx, p)
	}
}

// AfterDispatch calls h.OnAfterDispatch.
func (h Hooks) AfterDispatch(ctx context.Context, p *Pipeline) {
	if h.OnAfterDispatch != nil {
		h.OnAfterDispatch(ctx, p)
	}
}

// AfterFailure calls h.OnAfterFailure.
func (h Hooks) AfterFailure(ctx context.Context, p *Pipeline) {
	if h.OnAfterFailure != nil {
		h.OnAfterFailure(ctx, p)
	}
}
