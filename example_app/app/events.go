package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/components/cqrs"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"
	"github.com/google/uuid"
)

// StaffModel is how a node keeps its staff: StaffTable or StaffEvents.
type StaffModel string

// The staff models.
const (
	// StaffTable: CreateStaff inserts the member into the staff table, which
	// the email claims' lookup reads: strongly consistent.
	StaffTable StaffModel = "table"
	// StaffEvents: CreateStaff appends a StaffRegistered event to the
	// append-only staff_event table and publishes it; a projection fills the
	// staff table (the read model) from it after Config.ProjectionLag. The
	// email claims' lookup reads the read model, which lags, so the claims
	// reserve each email (Config.DisableReservations turns that off, to
	// show what goes wrong).
	StaffEvents StaffModel = "events"
)

// StaffRegistered is the event of a sign-up in the events staff model, as
// appended to the staff_event table and published to the projection.
type StaffRegistered struct {
	EventID string `json:"event_id"`
	StaffID string `json:"staff_id"`
	// Email is normalised, as the claims claimed it.
	Email string `json:"email"`
	Name  string `json:"name"`
	// CommandID is the UUID of the CreateStaff that appended the event.
	CommandID string `json:"command_id"`
	// RecordedAt is when the event was appended, by the node's clock: the
	// projection applies it ProjectionLag later.
	RecordedAt time.Time `json:"recorded_at"`
}

// projectionRetry is the pause of the projection after it failed to apply
// an event (the database is down), before the event comes again.
const projectionRetry = 100 * time.Millisecond

// projection applies the StaffRegistered events a node published to the
// staff read model: a Watermill cqrs EventProcessor on an in-process
// GoChannel. Each node projects the events it appended itself, so every
// event is applied once per database however many nodes share it (see
// the package documentation).
type projection struct {
	n      *Node
	lag    time.Duration
	pubsub *gochannel.GoChannel
	router *message.Router
	events *cqrs.EventBus
	ran    chan struct{} // closed when router.Run returned
	runErr error         // router.Run's error, read after ran

	mu      sync.Mutex
	pending int64         // events published and not applied yet
	changed chan struct{} // closed and replaced when pending changes
}

// startProjection starts the projection of n's events, applied lag after
// they were appended, and returns once it subscribed.
func startProjection(ctx context.Context, n *Node, lag time.Duration) (*projection, error) {
	// The router's start-up and per-handler records are debug detail here.
	logger := watermill.NewSlogLoggerWithLevelMapping(n.log.With("component", "projection"),
		map[slog.Level]slog.Level{slog.LevelInfo: slog.LevelDebug})
	p := &projection{
		n:       n,
		lag:     lag,
		pubsub:  gochannel.NewGoChannel(gochannel.Config{}, logger),
		ran:     make(chan struct{}),
		changed: make(chan struct{}),
	}
	marshaler := cqrs.JSONMarshaler{GenerateName: cqrs.StructName, NewUUID: uuid.NewString}
	topic := func(name string) string { return "claimbus.example.events." + name }
	router, err := message.NewRouter(message.RouterConfig{CloseTimeout: lag + 10*time.Second}, logger)
	if err != nil {
		return nil, fmt.Errorf("app: projection router: %w", err)
	}
	proc, err := cqrs.NewEventProcessorWithConfig(router, cqrs.EventProcessorConfig{
		GenerateSubscribeTopic: func(e cqrs.EventProcessorGenerateSubscribeTopicParams) (string, error) {
			return topic(e.EventName), nil
		},
		SubscriberConstructor: func(cqrs.EventProcessorSubscriberConstructorParams) (message.Subscriber, error) {
			return p.pubsub, nil
		},
		Marshaler: marshaler,
		Logger:    logger,
	})
	if err == nil {
		err = proc.AddHandlers(cqrs.NewEventHandler("staff_read_model", p.apply))
	}
	if err == nil {
		p.events, err = cqrs.NewEventBusWithConfig(p.pubsub, cqrs.EventBusConfig{
			GeneratePublishTopic: func(e cqrs.GenerateEventPublishTopicParams) (string, error) {
				return topic(e.EventName), nil
			},
			Marshaler: marshaler,
			Logger:    logger,
		})
	}
	if err != nil {
		return nil, errors.Join(fmt.Errorf("app: projection: %w", err), router.Close(), p.pubsub.Close())
	}
	p.router = router
	go func() {
		defer close(p.ran)
		p.runErr = router.Run(context.Background())
	}()
	select {
	case <-router.Running():
		return p, nil
	case <-p.ran:
		return nil, errors.Join(fmt.Errorf("app: projection: %w", p.runErr), p.pubsub.Close())
	case <-ctx.Done():
		return nil, errors.Join(ctx.Err(), p.close())
	}
}

// publish publishes ev to the projection.
func (p *projection) publish(ctx context.Context, ev *StaffRegistered) error {
	p.add(1)
	if err := p.events.Publish(ctx, ev); err != nil {
		p.add(-1)
		return fmt.Errorf("app: publish StaffRegistered: %w", err)
	}
	return nil
}

// apply is the projection's event handler: it waits until lag has passed
// since ev was appended, then applies it to the read model. A failure is
// retried (the event comes again) after a pause.
func (p *projection) apply(ctx context.Context, ev *StaffRegistered) error {
	if err := p.applyNow(ctx, ev); err != nil {
		p.n.log.WarnContext(ctx, "projection: cannot apply StaffRegistered, trying again", "event_id", ev.EventID, "error", err)
		t := time.NewTimer(projectionRetry)
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
		}
		return err
	}
	p.add(-1)
	return nil
}

// applyNow waits until lag has passed since ev was appended, then applies
// it to the read model.
func (p *projection) applyNow(ctx context.Context, ev *StaffRegistered) error {
	if wait := time.Until(ev.RecordedAt.Add(p.lag)); wait > 0 {
		t := time.NewTimer(wait)
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return p.n.project(ctx, ev)
}

// add adds d to the events pending and signals the change.
func (p *projection) add(d int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.pending += d
	close(p.changed)
	p.changed = make(chan struct{})
}

// wait returns once every event published so far is applied, or ctx's
// error.
func (p *projection) wait(ctx context.Context) error {
	for {
		p.mu.Lock()
		pending, changed := p.pending, p.changed
		p.mu.Unlock()
		if pending == 0 {
			return nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return fmt.Errorf("app: %d events not projected yet: %w", pending, ctx.Err())
		}
	}
}

// close stops the projection: events not applied yet are dropped.
func (p *projection) close() error {
	err := p.router.Close()
	<-p.ran
	return errors.Join(err, p.runErr, p.pubsub.Close())
}
