package telemetry

import (
	"context"
	"errors"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/claimbus/claimbus/internal/observe"
	"github.com/claimbus/claimbus/middleware"
)

var _ middleware.Middleware = (*Telemetry)(nil)

// consumerKind is made once: an option boxed per command allocates.
var consumerKind = trace.WithSpanKind(trace.SpanKindConsumer)

// command is the telemetry of one command run: its span and start, and
// the tracer of its steps.
type command struct {
	stepTracer
	p     *middleware.Pipeline
	ctx   context.Context // carries span
	start time.Time
	names *names
}

// BeforeDispatch starts the command's span, a child of the trace context
// in the message's metadata (see OnSend) or else of the span in the
// pipeline's context, and gives the pipeline's context (the handler's)
// the span and the tracer of the command's steps (observe.Tracer), where
// the later hooks find it: the uniqueness middleware reports its steps
// there.
func (t *Telemetry) BeforeDispatch(_ context.Context, p *middleware.Pipeline) {
	parent := t.propagator.Extract(p.Context(), propagation.MapCarrier(p.Metadata))
	names := t.namesOf(p.CommandName)
	// The attributes are set once, at the end (see end): one slice for
	// the span to keep instead of two.
	ctx, span := t.tracer.Start(parent, names.span, consumerKind)
	c := &command{stepTracer: stepTracer{t: t, fallback: span}, p: p, ctx: ctx, start: time.Now(), names: names}
	p.SetContext(observe.ContextWithTracer(ctx, c))
}

// AfterDispatch ends the command's span and measures its duration.
func (t *Telemetry) AfterDispatch(_ context.Context, p *middleware.Pipeline) { t.end(p) }

// AfterFailure ends the command's span with its outcome and measures its
// duration.
func (t *Telemetry) AfterFailure(_ context.Context, p *middleware.Pipeline) { t.end(p) }

// end ends the command of p: its span, its rejection count and its
// duration.
func (t *Telemetry) end(p *middleware.Pipeline) {
	// Found in the pipeline's context, which the later hooks derive from
	// the one BeforeDispatch set (see middleware.Pipeline.SetContext): no
	// Assigns map to allocate.
	c, ok := observe.TracerFromContext(p.Context()).(*command)
	if !ok || c.p != p {
		return
	}
	span := c.fallback
	attrs := [7]attribute.KeyValue{
		c.names.name,
		attrCommandID.String(p.CommandUUID),
		attrCorrelationID.String(p.CorrelationID),
		{}, // outcome
	}
	n := 4
	if p.CausationID != "" {
		attrs[n] = attrCausationID.String(p.CausationID)
		n++
	}
	outcome := outcomeOK
	err := p.Err()
	switch rej := rejection(err); {
	case err == nil:
	case rej != nil:
		outcome = outcomeRejected
		attrs[n], attrs[n+1] = attrRejectionCode.String(rej.Code), attrRejectionField.String(rej.Field)
		n += 2
		t.inst.rejections.Add(c.ctx, 1, c.names.rejection(rej.Code, rej.Field)...)
		if trouble(rej) {
			span.SetStatus(codes.Error, err.Error())
		}
	default:
		outcome = outcomeError
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	attrs[3] = attrOutcome.String(outcome)
	if span.IsRecording() {
		span.SetAttributes(attrs[:n]...)
	}
	t.inst.commandDuration.Record(c.ctx, time.Since(c.start).Seconds(), c.names.outcome[outcome]...)
	span.End()
}

// trouble reports whether rej is not the sender's mistake but trouble to
// look at: unavailable or a timeout.
func trouble(rej *middleware.Rejection) bool {
	return rej.Code == middleware.CodeUnavailable || rej.Code == middleware.CodeTimeout
}

// rejection returns the *middleware.Rejection in err's chain, or nil.
func rejection(err error) *middleware.Rejection {
	if err == nil {
		return nil // before errors.As: its target escapes
	}
	var rej *middleware.Rejection
	if errors.As(err, &rej) {
		return rej
	}
	return nil
}

// stepTracer makes a span of each step, a child of the span in the step's
// context or, when there is none, of fallback. It records the claim wait
// and hold histograms.
type stepTracer struct {
	t        *Telemetry
	fallback trace.Span
}

// StartStep starts the span of step; the holding of claims, which the
// command's span covers, is measured only (metricClaimHold).
func (s *stepTracer) StartStep(ctx context.Context, step, detail string) (context.Context, observe.EndFunc) {
	if step == observe.StepClaimHold {
		start := time.Now()
		return ctx, func(error) {
			s.t.inst.claimHold.Record(ctx, time.Since(start).Seconds(), s.t.namesOf(detail).hold...)
		}
	}
	if s.fallback != nil && !trace.SpanContextFromContext(ctx).IsValid() {
		ctx = trace.ContextWithSpan(ctx, s.fallback)
	}
	o := s.t.stepOptionsOf(step, detail)
	ctx, span := s.t.tracer.Start(ctx, step, o.start...)
	start := time.Now()
	return ctx, func(err error) {
		// A business answer (already_taken) is the step's outcome, not its
		// failure: the span records the code and keeps an unset status.
		rej := rejection(err)
		failed := err != nil && (rej == nil || trouble(rej))
		switch {
		case failed:
			span.SetAttributes(attrStepFailed.Bool(true))
			span.SetStatus(codes.Error, err.Error())
		case rej != nil:
			span.SetAttributes(attrRejectionCode.String(rej.Code))
		}
		if step == observe.StepClaimWait {
			s.t.inst.claimWait.Record(ctx, time.Since(start).Seconds(), o.wait[boolIndex(failed)]...)
		}
		span.End()
	}
}

func boolIndex(b bool) int {
	if b {
		return 1
	}
	return 0
}
