package natstransport

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/nats-io/nats.go"
)

// streamDescription describes the stream; it is part of the stream's
// configuration, so every node sends the same one.
const streamDescription = "claimbus bus/natstransport: commands and replies"

// streamConfig is the stream every node of cfg asks for: a work queue (a
// message is deleted once a consumer acks it) capturing
// SubjectPrefix.>.
func streamConfig(cfg Config) *nats.StreamConfig {
	storage := nats.FileStorage
	if cfg.MemoryStorage {
		storage = nats.MemoryStorage
	}
	return &nats.StreamConfig{
		Name:        cfg.Stream,
		Description: streamDescription,
		Subjects:    []string{cfg.SubjectPrefix + ".>"},
		Retention:   nats.WorkQueuePolicy,
		Storage:     storage,
		Replicas:    cfg.Replicas,
	}
}

// ensureStream creates the stream, or checks that it exists with the
// configuration this node wants.
func (t *Transport) ensureStream(outer context.Context) error {
	ctx, cancel := context.WithTimeout(outer, t.cfg.RequestTimeout)
	defer cancel()
	want := streamConfig(t.cfg)
	_, err := t.js.AddStream(want, nats.Context(ctx))
	if err == nil {
		return nil
	}
	if !errors.Is(err, nats.ErrStreamNameAlreadyInUse) {
		return wrap(outer, "create stream "+want.Name, err)
	}
	info, ierr := t.js.StreamInfo(want.Name, nats.Context(ctx))
	if ierr != nil {
		return wrap(outer, "create stream "+want.Name, errors.Join(err, ierr))
	}
	return fmt.Errorf("%w: stream %s exists with %s: change the configuration, or delete the stream (nats stream rm %s) to have it created anew",
		ErrConfigMismatch, want.Name, streamDiff(&info.Config, want), want.Name)
}

// streamDiff says how the stream's configuration differs from want, in
// the fields the transport sets.
func streamDiff(got, want *nats.StreamConfig) string {
	var d []string
	if !slices.Equal(got.Subjects, want.Subjects) {
		d = append(d, fmt.Sprintf("subjects %v (want %v)", got.Subjects, want.Subjects))
	}
	if got.Retention != want.Retention {
		d = append(d, fmt.Sprintf("retention %v (want %v)", got.Retention, want.Retention))
	}
	if got.Storage != want.Storage {
		d = append(d, fmt.Sprintf("storage %v (want %v)", got.Storage, want.Storage))
	}
	if got.Replicas != want.Replicas {
		d = append(d, fmt.Sprintf("%d replicas (want %d)", got.Replicas, want.Replicas))
	}
	if got.Description != want.Description {
		d = append(d, fmt.Sprintf("description %q (want %q)", got.Description, want.Description))
	}
	if len(d) == 0 {
		return "other settings (limits, discard policy, ...)"
	}
	return strings.Join(d, ", ")
}

// consumerConfig is the durable push consumer of topic every node asks
// for: filtered on the topic's subject, pushed to a fixed inbox subject
// that the nodes' subscriptions share as a queue group, every message
// acked explicitly within AckWait, redelivered without limit.
func (t *Transport) consumerConfig(topic string) *nats.ConsumerConfig {
	name := t.consumerName(topic)
	return &nats.ConsumerConfig{
		Durable:        name,
		Description:    "claimbus topic " + topic,
		DeliverSubject: deliverSubjectOf(t.cfg.Stream, name),
		DeliverGroup:   name,
		FilterSubject:  t.subject(topic),
		DeliverPolicy:  nats.DeliverAllPolicy,
		AckPolicy:      nats.AckExplicitPolicy,
		AckWait:        t.cfg.AckWait,
		MaxAckPending:  t.cfg.MaxAckPending,
		MaxDeliver:     -1,
		ReplayPolicy:   nats.ReplayInstantPolicy,
	}
}

// ensureConsumer creates topic's consumer, or checks that it exists with
// the configuration this node wants, and returns that configuration.
func (t *Transport) ensureConsumer(outer context.Context, topic string) (*nats.ConsumerConfig, error) {
	ctx, cancel := context.WithTimeout(outer, t.cfg.RequestTimeout)
	defer cancel()
	want := t.consumerConfig(topic)
	info, err := t.js.AddConsumer(t.cfg.Stream, want, nats.Context(ctx))
	if err != nil && consumerExists(err) {
		// Created by another node meanwhile, or with other settings.
		info, err = t.js.ConsumerInfo(t.cfg.Stream, want.Durable, nats.Context(ctx))
	}
	if err != nil {
		return nil, wrap(outer, fmt.Sprintf("create consumer %s of topic %q", want.Durable, topic), err)
	}
	if d := consumerDiff(&info.Config, want); d != "" {
		return nil, fmt.Errorf("%w: consumer %s of topic %q exists with %s: every node of stream %s must agree; delete the consumer (nats consumer rm %s %s) to change it",
			ErrConfigMismatch, want.Durable, topic, d, t.cfg.Stream, t.cfg.Stream, want.Durable)
	}
	return want, nil
}

// consumerExists reports whether err says the consumer exists already.
func consumerExists(err error) bool {
	if errors.Is(err, nats.ErrConsumerNameAlreadyInUse) {
		return true
	}
	var apiErr *nats.APIError
	return errors.As(err, &apiErr) &&
		(apiErr.ErrorCode == nats.JSErrCodeConsumerAlreadyExists || apiErr.ErrorCode == nats.JSErrCodeConsumerNameExists)
}

// consumerDiff says how a consumer's configuration differs from want, in
// the fields the transport relies on; empty when it does not.
func consumerDiff(got, want *nats.ConsumerConfig) string {
	var d []string
	add := func(field string, g, w any) {
		if g != w {
			d = append(d, fmt.Sprintf("%s %v (want %v)", field, g, w))
		}
	}
	add("filter subject", got.FilterSubject, want.FilterSubject)
	add("deliver subject", got.DeliverSubject, want.DeliverSubject)
	add("deliver group", got.DeliverGroup, want.DeliverGroup)
	add("deliver policy", got.DeliverPolicy, want.DeliverPolicy)
	add("ack policy", got.AckPolicy, want.AckPolicy)
	add("ack wait", got.AckWait, want.AckWait)
	add("max ack pending", got.MaxAckPending, want.MaxAckPending)
	add("max deliver", got.MaxDeliver, want.MaxDeliver)
	return strings.Join(d, ", ")
}
