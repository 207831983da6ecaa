package idempotency

import (
	"context"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/claimbus/claimbus/middleware"
)

// MetadataKey is the metadata key of a command message's idempotency key,
// as OnSend writes it and FromMetadata reads it.
const MetadataKey = "idempotency_key"

type keyCtx struct{}

// WithKey returns ctx carrying key, the idempotency key of the commands
// sent with it: an HTTP handler puts a request's Idempotency-Key header
// there, and OnSend copies it into the command's metadata.
func WithKey(ctx context.Context, key string) context.Context {
	return context.WithValue(ctx, keyCtx{}, key)
}

// OnSend fits bus.Config.OnSend: it writes the idempotency
// key ctx carries (WithKey), if any, into msg's metadata.
func OnSend(ctx context.Context, msg *message.Message) {
	key, _ := ctx.Value(keyCtx{}).(string)
	if key == "" {
		return
	}
	if msg.Metadata == nil {
		msg.Metadata = make(message.Metadata)
	}
	msg.Metadata.Set(MetadataKey, key)
}

// FromMetadata is a KeyFunc: the key in the command message's metadata
// (MetadataKey), "" when there is none.
func FromMetadata(p *middleware.Pipeline) string { return p.Metadata[MetadataKey] }
