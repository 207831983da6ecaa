package natstransport

import (
	"context"
	"fmt"
	"strings"

	wmnats "github.com/ThreeDotsLabs/watermill-nats/v2/pkg/nats"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/nats-io/nats.go"

	"github.com/claimbus/claimbus/bus"
)

// publisher maps topics to subjects and reports NATS outages as
// unavailable.
type publisher struct {
	t     *Transport
	inner *wmnats.Publisher
}

// Publish publishes msgs to topic's subject, one after the other; it
// stops at the first that fails.
func (p *publisher) Publish(topic string, msgs ...*message.Message) error {
	if p.t.isClosed() {
		return fmt.Errorf("natstransport: publish: %w", bus.ErrClosed)
	}
	if topic == "" {
		return fmt.Errorf("natstransport: publish: %w", bus.ErrInvalidTopic)
	}
	subject := p.t.subject(topic)
	if err := p.inner.Publish(subject, msgs...); err != nil {
		return wrap(context.Background(), "publish to "+subject, err)
	}
	return nil
}

// Close does nothing: the transport's Close closes the connection.
func (p *publisher) Close() error { return nil }

// marshaler is watermill-nats's NATSMarshaler (the payload as the data,
// the UUID and the metadata as headers), refusing metadata that a NATS
// header would not carry unchanged.
type marshaler struct{}

// Marshal checks msg's metadata and encodes msg.
func (marshaler) Marshal(subject string, msg *message.Message) (*nats.Msg, error) {
	for k, v := range msg.Metadata {
		if err := checkHeader(k, v); err != nil {
			return nil, fmt.Errorf("%w: message %s: %w", ErrInvalidMetadata, msg.UUID, err)
		}
	}
	return (&wmnats.NATSMarshaler{}).Marshal(subject, msg)
}

// checkHeader says why key and value cannot be a NATS header, if so.
func checkHeader(key, value string) error {
	if key == "" {
		return fmt.Errorf("empty key")
	}
	for i := range len(key) {
		if c := key[i]; c <= ' ' || c == ':' || c == 0x7f {
			return fmt.Errorf("key %q", key)
		}
	}
	if strings.HasPrefix(strings.ToLower(key), "nats-") || key == wmnats.WatermillUUIDHdr {
		return fmt.Errorf("key %q is reserved", key)
	}
	if strings.ContainsAny(value, "\r\n") {
		return fmt.Errorf("the value of %q has a line break", key)
	}
	if value != "" && (value[0] == ' ' || value[0] == '\t') {
		return fmt.Errorf("the value of %q starts with white space", key)
	}
	return nil
}
