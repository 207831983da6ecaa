package middleware

import "context"

// Metadata keys claimbus reads and writes on command messages.
const (
	// MetadataCorrelationID is the key of the correlation id; it is the key
	// Watermill's CorrelationID middleware uses.
	MetadataCorrelationID = "correlation_id"
	// MetadataCausationID is the key of the causation id.
	MetadataCausationID = "causation_id"
	// MetadataCommandName is the key of the command's name; it is the key
	// Watermill's cqrs marshalers use.
	MetadataCommandName = "name"
)

type idsKey struct{}

// IDs are the correlation and causation ids carried by a context.
type IDs struct {
	CorrelationID string
	CausationID   string
}

// WithIDs returns a ctx carrying ids; commands sent with it inherit them.
func WithIDs(ctx context.Context, ids IDs) context.Context {
	return context.WithValue(ctx, idsKey{}, ids)
}

// IDsFromContext returns the ids ctx carries, if any.
func IDsFromContext(ctx context.Context) (IDs, bool) {
	ids, ok := ctx.Value(idsKey{}).(IDs)
	return ids, ok
}
