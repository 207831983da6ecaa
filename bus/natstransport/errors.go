package natstransport

import (
	"context"
	"errors"
	"fmt"
	"net"

	"github.com/nats-io/nats.go"

	"github.com/claimbus/claimbus/middleware"
)

// Errors of the transport, matched with errors.Is. After Close, Publish and
// Subscribe fail with bus.ErrClosed, and with an empty topic (any other
// topic has a subject, see Transport.Subject) with bus.ErrInvalidTopic.
var (
	// ErrInvalidMetadata is returned by Publish for a message whose metadata
	// cannot travel in a NATS header unchanged: an empty key, a key with a
	// space, a colon or a control character, a key NATS or watermill-nats
	// reserve (Nats-..., _watermill_message_uuid), or a value with a line
	// break or leading white space.
	ErrInvalidMetadata = errors.New("natstransport: metadata cannot travel in a NATS header")
	// ErrConfigMismatch is returned by New when the stream exists with
	// another configuration, and by Subscribe when a topic's consumer does:
	// every node of one stream must agree on the settings that shape them.
	ErrConfigMismatch = errors.New("natstransport: configuration mismatch")
)

// errUnavailable is the rejection a transport error carries when NATS is
// down, unreachable or cannot store the message now: errors.Is matches it
// with middleware.ErrUnavailable, errors.As finds it as a
// *middleware.Rejection, so a sender (and the example app, which answers
// 503) tells "try again later" apart from a fault.
var errUnavailable = &middleware.Rejection{Code: middleware.CodeUnavailable, Message: "NATS is unavailable"}

// wrap returns err, the failure of op under ctx, as a transport error:
// matching middleware.ErrUnavailable when unavailable(ctx, err) holds.
func wrap(ctx context.Context, op string, err error) error {
	if unavailable(ctx, err) {
		return fmt.Errorf("natstransport: %s: %w: %w", op, errUnavailable, err)
	}
	return fmt.Errorf("natstransport: %s: %w", op, err)
}

// unavailable reports whether err says that NATS cannot serve the request
// now, as opposed to a request that is wrong: the connection is closed,
// draining or reconnecting (the transport keeps no reconnect buffer, so a
// publish fails at once), no server answered in time, JetStream has no
// responder for the subject (it is restarting, or the stream is gone), or
// JetStream answered 503 (not ready, out of resources). A deadline counts
// only when it is not ctx's own: a caller whose ctx ran out was not told
// "try again" by NATS.
func unavailable(ctx context.Context, err error) bool {
	if ctx.Err() != nil && errors.Is(err, ctx.Err()) {
		return false
	}
	for _, target := range []error{
		nats.ErrConnectionClosed, nats.ErrConnectionDraining, nats.ErrConnectionReconnecting,
		nats.ErrReconnectBufExceeded, nats.ErrDisconnected, nats.ErrStaleConnection, nats.ErrNoServers,
		nats.ErrTimeout, context.DeadlineExceeded, nats.ErrNoResponders, nats.ErrNoStreamResponse,
		nats.ErrJetStreamNotEnabled, nats.ErrJetStreamNotEnabledForAccount,
	} {
		if errors.Is(err, target) {
			return true
		}
	}
	var apiErr *nats.APIError
	if errors.As(err, &apiErr) && apiErr.Code == 503 {
		return true
	}
	var netErr net.Error
	return errors.As(err, &netErr)
}
