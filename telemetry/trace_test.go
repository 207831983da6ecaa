package telemetry_test

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/claimbus/claimbus/bus"
	"github.com/claimbus/claimbus/internal/observe"
	"github.com/claimbus/claimbus/middleware"
	"github.com/claimbus/claimbus/telemetry"
)

// node is the tracing of one node: its provider, recorder and Telemetry.
type node struct {
	tp  *sdktrace.TracerProvider
	rec *tracetest.SpanRecorder
	tel *telemetry.Telemetry
}

func newNode(t *testing.T) node {
	t.Helper()
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { require.NoError(t, tp.Shutdown(context.Background())) })
	tel, err := telemetry.New(telemetry.Config{TracerProvider: tp})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, tel.Close()) })
	return node{tp: tp, rec: rec, tel: tel}
}

// spansNamed returns the ended spans of rec named name.
func spansNamed(rec *tracetest.SpanRecorder, name string) []sdktrace.ReadOnlySpan {
	var out []sdktrace.ReadOnlySpan
	for _, s := range rec.Ended() {
		if s.Name() == name {
			out = append(out, s)
		}
	}
	return out
}

// attrs returns the attributes of s as a map.
func attrs(s sdktrace.ReadOnlySpan) map[attribute.Key]attribute.Value {
	m := make(map[attribute.Key]attribute.Value)
	for _, kv := range s.Attributes() {
		m[kv.Key] = kv.Value
	}
	return m
}

// childOf asserts that s is a child of parent.
func childOf(t *testing.T, parent trace.SpanContext, s sdktrace.ReadOnlySpan) {
	t.Helper()
	require.Equal(t, parent.TraceID(), s.SpanContext().TraceID(), "%s is in the trace", s.Name())
	require.Equal(t, parent.SpanID(), s.Parent().SpanID(), "%s is a child", s.Name())
}

// TestTraceCrossesTransport dispatches on node A and handles on node B,
// two buses sharing a GoChannel with tracer providers of their own: the
// handler's span on B is a child of the caller's span on A, and the claim's
// steps are children of the handler's span.
func TestTraceCrossesTransport(t *testing.T) {
	t.Parallel()
	ps := newGoChannel(t)
	a, b := newNode(t), newNode(t)
	db := &users{emails: map[string]bool{}}
	unique, _ := newUnique(t, db)
	startBus(t, bus.Config{Publisher: ps, Subscriber: ps, NodeID: "b", OnSend: b.tel.OnSend,
		Middleware: middlewares(b.tel, unique)}, db)
	busA := startBus(t, bus.Config{Publisher: ps, Subscriber: ps, NodeID: "a", OnSend: a.tel.OnSend}, nil)

	ctx, root := a.tp.Tracer("test").Start(context.Background(), "POST /users")
	id, err := bus.Dispatch[string](ctx, busA, &CreateUser{ID: "u1", Email: "ada@example.com"})
	require.NoError(t, err)
	require.Equal(t, "u1", id)
	_, err = bus.Dispatch[string](ctx, busA, &CreateUser{ID: "u2", Email: "ada@example.com"})
	require.ErrorIs(t, err, middleware.ErrAlreadyTaken)
	root.End()

	name := "handle " + busA.CommandName(&CreateUser{})
	cmds := spansNamed(b.rec, name)
	require.Len(t, cmds, 2, "one span per command on node B")
	for _, s := range cmds {
		childOf(t, root.SpanContext(), s)
		require.True(t, s.Parent().IsRemote(), "the parent came through the message")
		require.Equal(t, trace.SpanKindConsumer, s.SpanKind())
	}
	ok, rejected := attrs(cmds[0]), attrs(cmds[1])
	require.Equal(t, "ok", ok[attrOutcome].AsString())
	require.Equal(t, busA.CommandName(&CreateUser{}), ok[attrCommandName].AsString())
	require.NotEmpty(t, ok[attrCommandID].AsString())
	require.NotEmpty(t, ok[attrCorrelationID].AsString())
	require.Equal(t, codes.Unset, cmds[0].Status().Code)
	require.Equal(t, "rejected", rejected[attrOutcome].AsString())
	require.Equal(t, middleware.CodeAlreadyTaken, rejected[attrRejectionCode].AsString())
	require.Equal(t, "email", rejected[attrRejectionField].AsString())

	// The steps of the first command: its claim wait, with the lock and
	// lookup inside.
	first := cmds[0].SpanContext()
	var waits []sdktrace.ReadOnlySpan
	for _, s := range spansNamed(b.rec, observe.StepClaimWait) {
		if s.Parent().SpanID() == first.SpanID() {
			waits = append(waits, s)
		}
	}
	require.Len(t, waits, 1)
	require.Equal(t, "email", attrs(waits[0])[attrField].AsString())
	lock := spansNamed(b.rec, observe.StepLock)
	lookup := spansNamed(b.rec, observe.StepLookup)
	require.Len(t, lock, 2, "one lock per command")
	require.Len(t, lookup, 2, "one lookup per command")
	childOf(t, waits[0].SpanContext(), lock[0])
	childOf(t, waits[0].SpanContext(), lookup[0])
	require.Empty(t, spansNamed(b.rec, observe.StepClaimHold), "the holding is measured, not a span")

	// The duplicate's claim wait ended in already_taken: an answer, so no
	// error status.
	second := cmds[1].SpanContext()
	waits = waits[:0]
	for _, s := range spansNamed(b.rec, observe.StepClaimWait) {
		if s.Parent().SpanID() == second.SpanID() {
			waits = append(waits, s)
		}
	}
	require.Len(t, waits, 1)
	require.Equal(t, codes.Unset, waits[0].Status().Code, "already_taken is no span error")
	require.Equal(t, middleware.CodeAlreadyTaken, attrs(waits[0])[attrRejectionCode].AsString())
	require.False(t, attrs(waits[0])[attrStepFailed].AsBool())

	// Node A made no command span: only the caller's.
	require.Empty(t, spansNamed(a.rec, name))
}

var errInner = errors.New("inner failed")

// TestHandlerContextCarriesSpan checks that a command dispatched from a
// handler is a child of that handler's span, on an in-process bus, and that
// a failing handler's span has an error status.
func TestHandlerContextCarriesSpan(t *testing.T) {
	t.Parallel()
	n := newNode(t)
	type Outer struct{}
	type Inner struct{ Fail bool }
	bb, err := bus.New(bus.Config{OnSend: n.tel.OnSend, Middleware: middlewares(n.tel)})
	require.NoError(t, err)
	require.NoError(t, bus.Handle(bb, func(ctx context.Context, _ *Outer) (string, error) {
		_, err := bus.Dispatch[string](ctx, bb, &Inner{Fail: true})
		return "outer", err
	}))
	require.NoError(t, bus.Handle(bb, func(ctx context.Context, _ *Inner) (string, error) {
		_, end := observe.StartStep(ctx, observe.StepSerialize, "ledger")
		end(nil)
		return "", errInner
	}))
	require.NoError(t, bb.Start(context.Background()))
	t.Cleanup(func() { require.NoError(t, bb.Close()) })

	_, err = bus.Dispatch[string](context.Background(), bb, &Outer{})
	require.ErrorContains(t, err, errInner.Error())

	outer := spansNamed(n.rec, "handle "+bb.CommandName(&Outer{}))
	inner := spansNamed(n.rec, "handle "+bb.CommandName(&Inner{}))
	require.Len(t, outer, 1)
	require.Len(t, inner, 1)
	require.False(t, outer[0].Parent().IsValid(), "the outer command starts the trace")
	childOf(t, outer[0].SpanContext(), inner[0])
	require.Equal(t, codes.Error, inner[0].Status().Code)
	require.Equal(t, "error", attrs(inner[0])[attrOutcome].AsString())
	serial := spansNamed(n.rec, observe.StepSerialize)
	require.Len(t, serial, 1, "a step in the handler's context is traced")
	childOf(t, inner[0].SpanContext(), serial[0])
	require.Equal(t, "ledger", attrs(serial[0])[attrKeyNamespace].AsString())
}
