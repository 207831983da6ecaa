package telemetry

import (
	"context"
	"errors"
	"sync"

	"github.com/ThreeDotsLabs/watermill/message"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/claimbus/claimbus/internal/observe"
	"github.com/claimbus/claimbus/lockstore"
	"github.com/claimbus/claimbus/uniqueness"
)

// scopeName is the instrumentation scope of claimbus's tracer and meter.
const scopeName = "github.com/claimbus/claimbus/telemetry"

// Config configures Telemetry. The zero Config uses OpenTelemetry's global
// providers.
type Config struct {
	// TracerProvider makes the spans. Default otel.GetTracerProvider().
	TracerProvider trace.TracerProvider
	// MeterProvider makes the instruments. Default otel.GetMeterProvider().
	MeterProvider metric.MeterProvider
	// Propagator carries the trace context in message metadata (OnSend,
	// and BeforeDispatch on the handling node). Default the W3C Trace
	// Context propagator (metadata "traceparent" and "tracestate"), so
	// traces cross nodes without any global setup; every node must agree.
	Propagator propagation.TextMapPropagator
}

// Telemetry traces and measures the commands of a bus or a router on
// OpenTelemetry. It is a middleware.Middleware: put it first in the list,
// so that its span covers the others. Set its OnSend as bus.Config.OnSend so
// trace context travels with the commands sent. It is safe for concurrent
// use.
type Telemetry struct {
	tracer     trace.Tracer
	propagator propagation.TextMapPropagator
	inst       instruments

	mu       sync.Mutex
	lockers  []observed[lockstore.StatsReporter]
	claimers []observed[*uniqueness.Middleware]
	reg      metric.Registration

	names sync.Map // command name → *names
	steps sync.Map // stepKey → *stepOptions
}

// observed is a store registered for observable instruments, with the
// attributes of its measurements.
type observed[T any] struct {
	src   T
	attrs metric.MeasurementOption
}

// New returns Telemetry configured by cfg, with its instruments made.
func New(cfg Config) (*Telemetry, error) {
	tp := cfg.TracerProvider
	if tp == nil {
		tp = otel.GetTracerProvider()
	}
	mp := cfg.MeterProvider
	if mp == nil {
		mp = otel.GetMeterProvider()
	}
	prop := cfg.Propagator
	if prop == nil {
		prop = propagation.TraceContext{}
	}
	t := &Telemetry{tracer: tp.Tracer(scopeName), propagator: prop}
	meter := mp.Meter(scopeName)
	if err := t.inst.init(meter); err != nil {
		return nil, err
	}
	reg, err := meter.RegisterCallback(t.observe, t.inst.observables()...)
	if err != nil {
		return nil, err
	}
	t.reg = reg
	return t, nil
}

// Close stops the observable instruments reading the registered stores.
func (t *Telemetry) Close() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.lockers, t.claimers = nil, nil
	return t.reg.Unregister()
}

// OnSend writes the trace context of ctx into msg's metadata, with the
// configured propagator. It fits bus.Config.OnSend; call it
// on any command message to carry a trace across a transport.
func (t *Telemetry) OnSend(ctx context.Context, msg *message.Message) {
	if msg.Metadata == nil {
		msg.Metadata = make(message.Metadata)
	}
	t.propagator.Inject(ctx, propagation.MapCarrier(msg.Metadata))
}

// WithSteps returns ctx carrying a tracer that makes a span of each step
// the core reports under it (a Serialize call, a claim, a lookup), a child
// of the span in ctx. Commands get one of their own; this is for steps
// outside a command, such as a Serialize call of a background job.
func (t *Telemetry) WithSteps(ctx context.Context) context.Context {
	return observe.ContextWithTracer(ctx, &stepTracer{t: t})
}

// ObserveLocker adds the Stats of store l, named name (the attribute
// claimbus.store), to the observable instruments, until Close.
func (t *Telemetry) ObserveLocker(name string, l lockstore.StatsReporter) error {
	if l == nil {
		return errors.New("telemetry: ObserveLocker: nil store")
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.lockers = append(t.lockers, observed[lockstore.StatsReporter]{l, storeAttr(name)})
	return nil
}

// ObserveClaims adds the claims of c, named name (the attribute claimbus.store), to the
// observable instruments, until Close.
func (t *Telemetry) ObserveClaims(name string, c *uniqueness.Middleware) error {
	if c == nil {
		return errors.New("telemetry: ObserveClaims: nil claims")
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.claimers = append(t.claimers, observed[*uniqueness.Middleware]{c, storeAttr(name)})
	return nil
}

func storeAttr(name string) metric.MeasurementOption {
	return metric.WithAttributeSet(attribute.NewSet(attrStore.String(name)))
}

// observe reads the registered stores for the observable instruments.
func (t *Telemetry) observe(_ context.Context, o metric.Observer) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	in := &t.inst
	for _, l := range t.lockers {
		s := l.src.Stats()
		o.ObserveInt64(in.locksHeld, s.Held, l.attrs)
		o.ObserveInt64(in.locksWaiting, s.Waiting, l.attrs)
		o.ObserveInt64(in.roundTrips, s.RoundTrips, l.attrs)
		o.ObserveInt64(in.batched, s.BatchedRequests, l.attrs)
		o.ObserveInt64(in.reconnects, s.Reconnects, l.attrs)
		o.ObserveInt64(in.lockConns, s.Conns, l.attrs)
		o.ObserveInt64(in.locksLost, s.LocksLost, l.attrs)
		o.ObserveInt64(in.capacity, s.CapacityRefusals, l.attrs)
	}
	for _, c := range t.claimers {
		s := c.src.Stats()
		o.ObserveInt64(in.claimsHeld, s.Held, c.attrs)
		o.ObserveInt64(in.claimsWaiting, s.Waiting, c.attrs)
		o.ObserveInt64(in.resvPending, s.ReservationsPending, c.attrs)
		o.ObserveInt64(in.resvConfirmed, s.ReservationsConfirmed, c.attrs)
		o.ObserveInt64(in.resvCancelled, s.ReservationsCancelled, c.attrs)
	}
	return nil
}
