package middleware

import (
	"cmp"
	"context"
)

// idsKey is the context key of both the ids and the pipeline a context
// carries. Its value is a *Pipeline (set by the runner for the handler) or
// an *idsValue (set by WithIDs), so the nearest one wins for the ids and
// the pipeline carries over.
type idsKey struct{}

type idsValue struct {
	ids IDs
	p   *Pipeline
}

// IDs are the correlation and causation ids carried by a context.
type IDs struct {
	// CorrelationID is shared by every command of one business flow.
	CorrelationID string
	// CausationID is the id of the command that caused this one.
	CausationID string
}

// WithIDs returns a ctx carrying ids; commands sent with it inherit them.
// The pipeline ctx carries, if any, stays reachable with PipelineFromContext.
func WithIDs(ctx context.Context, ids IDs) context.Context {
	p, _ := PipelineFromContext(ctx)
	return context.WithValue(ctx, idsKey{}, &idsValue{ids: ids, p: p})
}

// IDsFromContext returns the ids ctx carries, if any. In a handler run by a
// Runner they are the ids of the command being handled, as the ids of the
// commands it sends: the command's correlation id (its UUID when it has
// none) and, as causation id, its UUID.
func IDsFromContext(ctx context.Context) (IDs, bool) {
	switch v := ctx.Value(idsKey{}).(type) {
	case *Pipeline:
		return v.childIDs(), true
	case *idsValue:
		return v.ids, true
	}
	return IDs{}, false
}

// PipelineFromContext returns the pipeline of the run ctx belongs to: the
// handler's context and the context of an adapter's ResultFunc carry it.
// A handler reads the values hooks assigned with it (a claimed handle, a
// lock's fencing token).
func PipelineFromContext(ctx context.Context) (*Pipeline, bool) {
	switch v := ctx.Value(idsKey{}).(type) {
	case *Pipeline:
		return v, true
	case *idsValue:
		return v.p, v.p != nil
	}
	return nil, false
}

// withPipeline returns ctx carrying p (and through it the ids of the
// commands the handler sends).
func withPipeline(ctx context.Context, p *Pipeline) context.Context {
	return context.WithValue(ctx, idsKey{}, p)
}

// handlerCtx is a context carrying a pipeline, as withPipeline's: its
// Value answers idsKey with p and asks its parent for any other key, so
// that cancellation, deadlines and derived contexts are the parent's.
type handlerCtx struct {
	context.Context
	p *Pipeline
}

// Value returns p under idsKey, and the parent's value otherwise.
func (c *handlerCtx) Value(key any) any {
	if _, ok := key.(idsKey); ok {
		return c.p
	}
	return c.Context.Value(key)
}

// String names the context, as the standard library's do.
func (c *handlerCtx) String() string { return "middleware.handlerCtx" }

// childIDs are the ids of the commands caused by the one p carries.
func (p *Pipeline) childIDs() IDs {
	return IDs{CorrelationID: cmp.Or(p.CorrelationID, p.CommandUUID), CausationID: p.CommandUUID}
}
