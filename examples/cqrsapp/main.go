// Command cqrsapp is a Watermill cqrs app that adopts claimbus: its
// CreateStaff handler answers requestreply senders, and claimbus makes one
// staff per email across instances (a claim, and a reservation for a read
// model that lags), runs each Idempotency-Key once, and traces every
// command. The claimbus wiring is the ten lines in newInstance.
package main

import (
	"context"
	"errors"
	"fmt"
	"log"
	"strings"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/components/cqrs"
	"github.com/ThreeDotsLabs/watermill/components/requestreply"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"

	"github.com/claimbus/claimbus/claimstore"
	"github.com/claimbus/claimbus/idempotency"
	"github.com/claimbus/claimbus/lockstore"
	"github.com/claimbus/claimbus/middleware"
	"github.com/claimbus/claimbus/telemetry"
	"github.com/claimbus/claimbus/uniqueness"
)

// CreateStaff is the app's command.
type CreateStaff struct {
	StaffID string `json:"staff_id"`
	Email   string `json:"email"`
}

// Created is CreateStaff's result.
type Created struct {
	StaffID string `json:"staff_id"`
}

// staffTable stands in for the app's staff table: the handler writes it
// and the rule's lookup reads it.
type staffTable struct {
	mu     sync.Mutex
	emails map[string]string // normalised email: staff id
}

func (s *staffTable) taken(_ context.Context, email string) (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.emails[email]
	return ok, nil
}

func (s *staffTable) create(_ context.Context, c *CreateStaff) (Created, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.emails[uniqueness.NormalizeEmail(c.Email)] = c.StaffID
	return Created{StaffID: c.StaffID}, nil
}

// shared is what the instances share: the stores (lockstore/postgres and
// claimstore/postgres across processes), the replies' Pub/Sub and the
// staff table.
type shared struct {
	locks   lockstore.Locker
	claims  claimstore.Store
	replies *gochannel.GoChannel
	tel     *telemetry.Telemetry
	staff   *staffTable
	logger  watermill.LoggerAdapter
}

// instance is one instance of the app: a router running a command
// processor, and the requestreply set-up its senders use.
type instance struct {
	router *message.Router
	rr     *middleware.RequestReply[Created]
}

// newInstance builds an instance handling the commands of commands.
func newInstance(sh *shared, commands message.Subscriber) (*instance, error) {
	router, err := message.NewRouter(message.RouterConfig{}, sh.logger)
	if err != nil {
		return nil, err
	}
	emailRule := uniqueness.Field(uniqueness.Names{Field: "email", Scope: "staff.email"},
		func(c *CreateStaff) string { return c.Email }, sh.staff.taken,
		uniqueness.Normalize(uniqueness.NormalizeEmail), uniqueness.Reserve(sh.claims, time.Minute))

	// The claimbus wiring: ten lines.
	rr, err1 := middleware.NewRequestReply[Created](replyConfig(sh.replies))
	unique, err2 := uniqueness.New(uniqueness.Config{Locker: sh.locks, Rules: []uniqueness.Rule{emailRule}})
	idem, err3 := idempotency.New(idempotency.Config{Locker: sh.locks, Store: sh.claims, Retention: 24 * time.Hour, Key: idempotency.FromMetadata})
	if err := errors.Join(err1, err2, err3); err != nil {
		return nil, err
	}
	handler := requestreply.NewCommandHandlerWithResult("create_staff", rr, sh.staff.create) // the app's own handler, with rr as its backend
	onHandle, err := rr.OnHandle([]cqrs.CommandHandler{handler}, sh.tel, idem, unique)
	if err != nil {
		return nil, err
	}

	proc, err := cqrs.NewCommandProcessorWithConfig(router, cqrs.CommandProcessorConfig{
		GenerateSubscribeTopic: func(cqrs.CommandProcessorGenerateSubscribeTopicParams) (string, error) { return "commands", nil },
		SubscriberConstructor: func(cqrs.CommandProcessorSubscriberConstructorParams) (message.Subscriber, error) {
			return commands, nil
		},
		Marshaler: cqrs.JSONMarshaler{},
		Logger:    sh.logger,
		OnHandle:  onHandle,
	})
	if err != nil {
		return nil, err
	}
	if err := proc.AddHandlers(handler); err != nil {
		return nil, err
	}
	return &instance{router: router, rr: rr}, nil
}

// newCommandBus returns the bus a sender uses to send commands to
// commands, carrying the trace and the Idempotency-Key of its context.
func newCommandBus(sh *shared, commands message.Publisher) (*cqrs.CommandBus, error) {
	return cqrs.NewCommandBusWithConfig(commands, cqrs.CommandBusConfig{
		GeneratePublishTopic: func(cqrs.CommandBusGeneratePublishTopicParams) (string, error) { return "commands", nil },
		Marshaler:            cqrs.JSONMarshaler{},
		OnSend:               middleware.CQRSOnSend(sh.tel.OnSend, idempotency.OnSend),
	})
}

func replyConfig(ps *gochannel.GoChannel) requestreply.PubSubBackendConfig {
	return requestreply.PubSubBackendConfig{
		Publisher: ps,
		SubscriberConstructor: func(requestreply.PubSubBackendSubscribeParams) (message.Subscriber, error) {
			return ps, nil
		},
		GeneratePublishTopic:   func(requestreply.PubSubBackendPublishParams) (string, error) { return "replies", nil },
		GenerateSubscribeTopic: func(requestreply.PubSubBackendSubscribeParams) (string, error) { return "replies", nil },
	}
}

// send sends cmd with key (none when "") through bus and waits for its
// reply; it returns the line the example prints.
func send(ctx context.Context, bus *cqrs.CommandBus, rr *middleware.RequestReply[Created], key string, cmd CreateStaff) (string, error) {
	if key != "" {
		ctx = idempotency.WithKey(ctx, key)
	}
	reply, err := requestreply.SendWithReply[Created](ctx, bus, rr, &cmd)
	if err != nil {
		return "", err
	}
	var rej *middleware.Rejection
	if errors.As(reply.Error, &rej) {
		return fmt.Sprintf("%s: %d %s (%s)", cmd.Email, middleware.HTTPStatus(reply.Error), rej.Code, rej.Field), nil
	}
	if reply.Error != nil {
		return "", reply.Error
	}
	return fmt.Sprintf("%s: 201 %s", cmd.Email, reply.HandlerResult.StaffID), nil
}

func main() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	lines, err := run(ctx, telemetry.Config{})
	cancel()
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(strings.Join(lines, "\n"))
}

// run starts two instances, each on its own command topic, and sends them
// sign-ups: a duplicate email on the other instance, a retry with the same
// Idempotency-Key. It returns what each sender got.
func run(ctx context.Context, tcfg telemetry.Config) ([]string, error) {
	logger := watermill.NopLogger{}
	locks, err := lockstore.NewMemory(lockstore.MemoryConfig{}) // lockstore/postgres across processes
	if err != nil {
		return nil, err
	}
	defer func() { _ = locks.Close() }()
	tel, err := telemetry.New(tcfg)
	if err != nil {
		return nil, err
	}
	defer func() { _ = tel.Close() }()
	replies := gochannel.NewGoChannel(gochannel.Config{}, logger)
	defer func() { _ = replies.Close() }()
	sh := &shared{locks: locks, claims: claimstore.NewMemory(claimstore.MemoryConfig{}), replies: replies,
		tel: tel, staff: &staffTable{emails: map[string]string{}}, logger: logger}

	var buses []*cqrs.CommandBus
	var instances []*instance
	runCtx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() { stop(); wg.Wait() }()
	for range 2 {
		commands := gochannel.NewGoChannel(gochannel.Config{}, logger)
		defer func() { _ = commands.Close() }()
		in, err := newInstance(sh, commands)
		if err != nil {
			return nil, err
		}
		bus, err := newCommandBus(sh, commands)
		if err != nil {
			return nil, err
		}
		wg.Go(func() { _ = in.router.Run(runCtx) })
		<-in.router.Running()
		instances, buses = append(instances, in), append(buses, bus)
	}

	var lines []string
	for _, s := range []struct {
		on  int
		key string
		cmd CreateStaff
	}{
		{0, "req-1", CreateStaff{StaffID: "s-1", Email: "ann@example.org"}},
		{1, "", CreateStaff{StaffID: "s-2", Email: "ANN@example.org"}},
		{1, "req-1", CreateStaff{StaffID: "s-1", Email: "ann@example.org"}},
	} {
		line, err := send(ctx, buses[s.on], instances[s.on].rr, s.key, s.cmd)
		if err != nil {
			return nil, err
		}
		lines = append(lines, fmt.Sprintf("instance %d: %s", s.on, line))
	}
	return lines, nil
}
