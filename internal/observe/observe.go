package observe

import "context"

// Names of the steps the core packages report, with what their detail
// argument is.
const (
	// StepClaimWait is the wait for one claim of the uniqueness middleware,
	// from its start until the claim is granted or fails (its lock and its
	// lookups included). Detail: the field.
	StepClaimWait = "claimbus.claim.wait"
	// StepClaimHold is the holding of a command's claims, from the last
	// one granted until they are released. Detail: the command's name.
	StepClaimHold = "claimbus.claim.hold"
	// StepLookup is one lookup of a claimed value. Detail: the field.
	StepLookup = "claimbus.lookup"
	// StepLock is the acquisition of one lock by a claim. Detail: the
	// key's namespace.
	StepLock = "claimbus.lock"
	// StepSerialize is one Serialize or Exclusive call of the PostgreSQL
	// lock store, from its wait for the key to its commit. Detail: the
	// key's namespace.
	StepSerialize = "claimbus.serialize"
	// StepReservationWrite is one write to a reservation store: a reserve,
	// confirm or cancel. Detail: the field.
	StepReservationWrite = "claimbus.reservation.write"
	// StepIdempotency is the idempotency middleware's start of a command:
	// the wait for its key's lock and the read of its stored outcome.
	// Detail: the command's name.
	StepIdempotency = "claimbus.idempotency"
)

// Tracer is told about the steps of a command.
type Tracer interface {
	// StartStep begins step, with detail saying what it concerns (see the
	// Step constants). The returned context is derived from ctx and
	// carries the step, so that steps started with it nest inside; end is
	// called once, with the step's error or nil.
	StartStep(ctx context.Context, step, detail string) (context.Context, EndFunc)
}

// EndFunc ends a step with its error, or nil when it succeeded.
type EndFunc func(err error)

// tracerKey is the context key of a Tracer.
type tracerKey struct{}

// ContextWithTracer returns ctx carrying t; steps started with it, or with
// a context derived from it, go to t. A nil t removes the tracer.
func ContextWithTracer(ctx context.Context, t Tracer) context.Context {
	return context.WithValue(ctx, tracerKey{}, t)
}

// TracerFromContext returns the Tracer ctx carries, or nil.
func TracerFromContext(ctx context.Context) Tracer {
	t, _ := ctx.Value(tracerKey{}).(Tracer)
	return t
}

// noEnd is the EndFunc of a step nobody traces: it does nothing.
func noEnd(error) {}

// StartStep begins step on the Tracer ctx carries. Without one it returns
// ctx and an EndFunc that does nothing, allocating nothing; the lookup walks ctx's chain, so code
// that runs several steps for one command looks the tracer up once
// (TracerFromContext) and calls StartStepOn.
func StartStep(ctx context.Context, step, detail string) (context.Context, EndFunc) {
	return StartStepOn(ctx, TracerFromContext(ctx), step, detail)
}

// StartStepOn begins step on t. A nil t costs a nil check: it returns ctx
// and an EndFunc that does nothing.
func StartStepOn(ctx context.Context, t Tracer, step, detail string) (context.Context, EndFunc) {
	if t == nil {
		return ctx, noEnd
	}
	return t.StartStep(ctx, step, detail)
}
