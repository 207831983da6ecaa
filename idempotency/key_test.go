package idempotency_test

import (
	"context"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/components/cqrs"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"

	"github.com/claimbus/claimbus/bus"
	"github.com/claimbus/claimbus/idempotency"
	"github.com/claimbus/claimbus/middleware"
)

// A key put in the sender's context (WithKey) reaches the pipeline through
// the message's metadata: two dispatches under one key run once, on every
// transport; without a key, each runs.
func TestKeyFromContextOverTheBus(t *testing.T) {
	t.Parallel()
	for _, tr := range transports {
		t.Run(tr.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			cfg := e.config()
			cfg.Key = idempotency.FromMetadata
			bcfg := tr.cfg(t)
			bcfg.OnSend = idempotency.OnSend
			b := e.node(bcfg, e.middleware(cfg))
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			keyed := idempotency.WithKey(ctx, "order-7")
			first, err := bus.Dispatch[Receipt](keyed, b, &Pay{Amount: 3})
			require.NoError(t, err)
			again, err := bus.Dispatch[Receipt](keyed, b, &Pay{Amount: 3})
			require.NoError(t, err)
			require.Equal(t, first, again)
			require.EqualValues(t, 1, e.runs.Load())

			_, err = bus.Dispatch[Receipt](ctx, b, &Pay{Amount: 3})
			require.NoError(t, err)
			_, err = bus.Dispatch[Receipt](ctx, b, &Pay{Amount: 3})
			require.NoError(t, err)
			require.EqualValues(t, 3, e.runs.Load(), "commands without a key run each time")
		})
	}
}

// OnSend, through middleware.CQRSOnSend, writes the key of the sender's
// context into the message a cqrs.CommandBus sends.
func TestCQRSOnSend(t *testing.T) {
	t.Parallel()
	var sent []*message.Message
	pub := publisherFunc(func(_ string, msgs ...*message.Message) error { sent = append(sent, msgs...); return nil })
	cb, err := cqrs.NewCommandBusWithConfig(pub, cqrs.CommandBusConfig{
		GeneratePublishTopic: func(cqrs.CommandBusGeneratePublishTopicParams) (string, error) { return "commands", nil },
		Marshaler:            cqrs.JSONMarshaler{},
		OnSend:               middleware.CQRSOnSend(idempotency.OnSend),
	})
	require.NoError(t, err)
	require.NoError(t, cb.Send(idempotency.WithKey(context.Background(), "k-1"), &Pay{Amount: 1}))
	require.NoError(t, cb.Send(context.Background(), &Pay{Amount: 1}))
	require.Len(t, sent, 2)
	require.Equal(t, "k-1", sent[0].Metadata.Get(idempotency.MetadataKey))
	_, ok := sent[1].Metadata[idempotency.MetadataKey]
	require.False(t, ok)
}

type publisherFunc func(topic string, msgs ...*message.Message) error

func (f publisherFunc) Publish(topic string, msgs ...*message.Message) error {
	return f(topic, msgs...)
}
func (publisherFunc) Close() error { return nil }
