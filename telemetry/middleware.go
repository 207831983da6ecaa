package telemetry

import (
	"context"
	"errors"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/claimbus/claimbus/middleware"
	"github.com/claimbus/claimbus/observe"
)

// AssignCommand is the key under which BeforeDispatch keeps the command's
// telemetry in the pipeline's Assigns.
const AssignCommand = "telemetry.command"

var _ middleware.Middleware = (*Telemetry)(nil)

// command is the telemetry of one command run: its span and start, and
// the tracer of its steps.
type command struct {
	stepTracer
	ctx   context.Context // carries span
	start time.Time
}

// BeforeDispatch starts the command's span, a child of the trace context
// in the message's metadata (see OnSend) or else of the span in the
// pipeline's context, and gives the pipeline's context (the handler's)
// the span and the tracer of the command's steps (observe.Tracer), where
// the later hooks find it: the uniqueness middleware reports its steps
// there.
func (t *Telemetry) BeforeDispatch(_ context.Context, p *middleware.Pipeline) {
	parent := t.propagator.Extract(p.Context(), propagation.MapCarrier(p.Metadata))
	attrs := [4]attribute.KeyValue{
		AttrCommandName.String(p.CommandName),
		AttrCommandID.String(p.CommandUUID),
		AttrCorrelationID.String(p.CorrelationID),
		AttrCausationID.String(p.CausationID),
	}
	n := 3
	if p.CausationID != "" {
		n = 4
	}
	ctx, span := t.tracer.Start(parent, "handle "+p.CommandName,
		trace.WithSpanKind(trace.SpanKindConsumer), trace.WithAttributes(attrs[:n]...))
	c := &command{stepTracer: stepTracer{t: t, fallback: span}, ctx: ctx, start: time.Now()}
	p.SetContext(observe.ContextWithTracer(ctx, c))
	p.Assign(AssignCommand, c)
}

// AfterDispatch ends the command's span and counts it as done.
func (t *Telemetry) AfterDispatch(_ context.Context, p *middleware.Pipeline) { t.end(p) }

// AfterFailure ends the command's span with its outcome and counts it.
func (t *Telemetry) AfterFailure(_ context.Context, p *middleware.Pipeline) { t.end(p) }

// end ends the command of p: its span, its counts and its duration.
func (t *Telemetry) end(p *middleware.Pipeline) {
	v, _ := p.Assigned(AssignCommand)
	c, ok := v.(*command)
	if !ok {
		return
	}
	span := c.fallback
	outcome := OutcomeOK
	err := p.Err()
	var rej *middleware.Rejection
	switch {
	case err == nil:
	case errors.As(err, &rej):
		outcome = OutcomeRejected
		span.SetAttributes(AttrRejectionCode.String(rej.Code), AttrRejectionField.String(rej.Field))
		t.inst.rejections.Add(c.ctx, 1, metric.WithAttributes(
			AttrCommandName.String(p.CommandName), AttrRejectionCode.String(rej.Code), AttrRejectionField.String(rej.Field)))
		if rej.Code == middleware.CodeUnavailable || rej.Code == middleware.CodeTimeout {
			// Not the sender's mistake: trouble to look at.
			span.SetStatus(codes.Error, err.Error())
		}
	default:
		outcome = OutcomeError
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	span.SetAttributes(AttrOutcome.String(outcome))
	set := metric.WithAttributeSet(attribute.NewSet(AttrCommandName.String(p.CommandName), AttrOutcome.String(outcome)))
	t.inst.commands.Add(c.ctx, 1, set)
	t.inst.commandDuration.Record(c.ctx, time.Since(c.start).Seconds(), set)
	span.End()
}

// stepTracer makes a span of each step, a child of the span in the step's
// context or, when there is none, of fallback. It records the claim wait
// and hold histograms.
type stepTracer struct {
	t        *Telemetry
	fallback trace.Span
}

// StartStep starts the span of step.
func (s *stepTracer) StartStep(ctx context.Context, step, detail string) (context.Context, observe.EndFunc) {
	if s.fallback != nil && !trace.SpanContextFromContext(ctx).IsValid() {
		ctx = trace.ContextWithSpan(ctx, s.fallback)
	}
	var attr attribute.KeyValue
	switch step {
	case observe.StepLock, observe.StepSerialize:
		attr = AttrKeyNamespace.String(detail)
	case observe.StepClaimHold:
		attr = AttrCommandName.String(detail)
	default:
		attr = AttrField.String(detail)
	}
	ctx, span := s.t.tracer.Start(ctx, step, trace.WithAttributes(attr))
	start := time.Now()
	return ctx, func(err error) {
		if err != nil {
			span.SetAttributes(AttrStepFailed.Bool(true))
			span.SetStatus(codes.Error, err.Error())
		}
		switch step {
		case observe.StepClaimWait:
			s.t.inst.claimWait.Record(ctx, time.Since(start).Seconds(),
				metric.WithAttributes(attr, AttrStepFailed.Bool(err != nil)))
		case observe.StepClaimHold:
			s.t.inst.claimHold.Record(ctx, time.Since(start).Seconds(), metric.WithAttributes(attr))
		}
		span.End()
	}
}
