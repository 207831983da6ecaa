// Package observe is the seam through which the core packages report the
// internal steps of a command (waiting for a claim, a lookup, taking a
// lock, a Serialize transaction, a reservation write) to a tracer, without
// depending on any tracing library.
//
// A Tracer travels in a context (ContextWithTracer). Code that runs a step
// calls StartStep and ends the step with the function it returns:
//
//	ctx, end := observe.StartStep(ctx, observe.StepLookup, field)
//	taken, err := lookup(ctx)
//	end(err)
//
// When no tracer is in ctx, StartStep returns ctx and a function that does
// nothing: one context lookup, no allocation. The telemetry package
// provides a Tracer on OpenTelemetry; any other implementation works too.
package observe
