package uniqueness_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/components/cqrs"
	"github.com/ThreeDotsLabs/watermill/message"
	wmiddleware "github.com/ThreeDotsLabs/watermill/message/router/middleware"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"

	"github.com/claimbus/claimbus/commands"
	"github.com/claimbus/claimbus/lockstore"
	"github.com/claimbus/claimbus/middleware"
	"github.com/claimbus/claimbus/uniqueness"
)

// staffDB stands in for the staff table of the examples: the handler
// inserts into it and the lookup reads it, so the lookup sees every
// committed write.
type staffDB struct {
	mu     sync.Mutex
	emails map[string]string // normalised email → staff id
}

func (s *staffDB) emailTaken(_ context.Context, email string) (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.emails[email]
	return ok, nil
}

func (s *staffDB) insert(c *commands.CreateStaff) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	email := uniqueness.NormalizeEmail(c.Email)
	if _, ok := s.emails[email]; ok {
		return errors.New("unique index staff_email violated") // the backstop; never fires
	}
	s.emails[email] = c.StaffID
	return nil
}

// check stops an example on a setup error.
func check(err error) {
	if err != nil {
		panic(err)
	}
}

// outcome describes a command's outcome in one line.
func outcome(err error) string {
	var rej *middleware.Rejection
	if errors.As(err, &rej) {
		return rej.Code + " (field " + rej.Field + ")"
	}
	if err != nil {
		return "failed: " + err.Error()
	}
	return "created"
}

// newStaffRunner returns the pipeline of the examples: validation first (an
// invalid command claims nothing), then the Uniqueness middleware claiming
// CreateStaff's email.
func newStaffRunner(store lockstore.Locker, db *staffDB) *middleware.Runner {
	unique, err := uniqueness.New(uniqueness.Config{
		Locker: store,
		Rules: []uniqueness.Rule{
			uniqueness.Field(uniqueness.Names{Field: "email", Scope: "staff.email"},
				func(c *commands.CreateStaff) string { return c.Email },
				db.emailTaken,
				uniqueness.Normalize(uniqueness.NormalizeEmail)),
		},
	})
	check(err)
	runner, err := middleware.NewRunner(middleware.RunnerConfig{
		Middleware: []middleware.Middleware{middleware.Validate(), unique},
	})
	check(err)
	return runner
}

var exampleCommands = []*commands.CreateStaff{
	{StaffID: "s-1", Email: "ann@example.org", Name: "Ann"},
	{StaffID: "s-2", Email: " ANN@Example.org", Name: "Ann again"},
	{StaffID: "s-3", Email: "Ann <ann@example.org>", Name: "Ann with a display name"},
	{StaffID: "s-4", Email: "bob@example.org", Name: "Bob"},
}

// Uniqueness added to a cqrs command processor the user built, on a router
// with the user's own Watermill middleware, through OnHandle.
func Example_cqrsProcessor() {
	ctx := context.Background()
	logger := watermill.NopLogger{}
	pubSub := gochannel.NewGoChannel(gochannel.Config{}, logger)
	defer pubSub.Close()
	store, err := lockstore.NewMemory(lockstore.MemoryConfig{})
	check(err)
	defer store.Close()
	db := &staffDB{emails: map[string]string{}}

	// The user's router, with its own middleware.
	router, err := message.NewRouter(message.RouterConfig{}, logger)
	check(err)
	router.AddMiddleware(wmiddleware.Recoverer, wmiddleware.CorrelationID)

	// The pipeline runs in the processor's OnHandle; each outcome is
	// reported to OnResult (where a service would answer the sender).
	outcomes := make(chan string)
	handler := cqrs.NewCommandHandler("create_staff",
		func(ctx context.Context, c *commands.CreateStaff) error { return db.insert(c) })
	onHandle, err := middleware.OnHandle(middleware.HandlerConfig{
		Runner:           newStaffRunner(store, db),
		Handlers:         []cqrs.CommandHandler{handler},
		AckHandlerErrors: true,
		OnResult: func(_ context.Context, _ *message.Message, _ any, err error) error {
			outcomes <- outcome(err)
			return nil
		},
	})
	check(err)
	marshaler := cqrs.JSONMarshaler{}
	processor, err := cqrs.NewCommandProcessorWithConfig(router, cqrs.CommandProcessorConfig{
		GenerateSubscribeTopic: func(cqrs.CommandProcessorGenerateSubscribeTopicParams) (string, error) {
			return "staff.commands", nil
		},
		SubscriberConstructor: func(cqrs.CommandProcessorSubscriberConstructorParams) (message.Subscriber, error) {
			return pubSub, nil
		},
		OnHandle:  onHandle,
		Marshaler: marshaler,
		Logger:    logger,
	})
	check(err)
	check(processor.AddHandlers(handler))
	commandBus, err := cqrs.NewCommandBusWithConfig(pubSub, cqrs.CommandBusConfig{
		GeneratePublishTopic: func(cqrs.CommandBusGeneratePublishTopicParams) (string, error) {
			return "staff.commands", nil
		},
		Marshaler: marshaler,
		Logger:    logger,
	})
	check(err)

	go func() { check(router.Run(ctx)) }()
	<-router.Running()
	defer router.Close()

	for _, c := range exampleCommands {
		check(commandBus.Send(ctx, c))
		fmt.Printf("%-24q %s\n", c.Email, <-outcomes)
	}
	// Output:
	// "ann@example.org"        created
	// " ANN@Example.org"       already_taken (field email)
	// "Ann <ann@example.org>"  invalid (field email)
	// "bob@example.org"        created
}

// Uniqueness added to a plain handler of a router the user built, beside
// the user's own middleware, through RouterMiddleware.
func Example_router() {
	ctx := context.Background()
	logger := watermill.NopLogger{}
	pubSub := gochannel.NewGoChannel(gochannel.Config{}, logger)
	defer pubSub.Close()
	store, err := lockstore.NewMemory(lockstore.MemoryConfig{})
	check(err)
	defer store.Close()
	db := &staffDB{emails: map[string]string{}}

	// The registry names and decodes the commands the pipeline runs.
	marshaler := cqrs.JSONMarshaler{}
	registry := middleware.NewRegistry(marshaler)
	_, err = middleware.Register[commands.CreateStaff](registry)
	check(err)
	outcomes := make(chan string)
	pipeline, err := middleware.RouterMiddleware(middleware.RouterConfig{
		Runner:           newStaffRunner(store, db),
		Registry:         registry,
		AckHandlerErrors: true,
		OnResult: func(_ context.Context, _ *message.Message, _ any, err error) error {
			outcomes <- outcome(err)
			return nil
		},
	})
	check(err)

	router, err := message.NewRouter(message.RouterConfig{}, logger)
	check(err)
	router.AddMiddleware(wmiddleware.Recoverer) // the user's own
	handler := router.AddConsumerHandler("create_staff", "staff.commands", pubSub,
		func(msg *message.Message) error {
			var c commands.CreateStaff
			if err := json.Unmarshal(msg.Payload, &c); err != nil {
				return err
			}
			return db.insert(&c)
		})
	handler.AddMiddleware(pipeline)

	go func() { check(router.Run(ctx)) }()
	<-router.Running()
	defer router.Close()

	for _, c := range exampleCommands {
		msg, err := marshaler.Marshal(c) // sets the "name" metadata
		check(err)
		check(pubSub.Publish("staff.commands", msg))
		fmt.Printf("%-24q %s\n", c.Email, <-outcomes)
	}
	// Output:
	// "ann@example.org"        created
	// " ANN@Example.org"       already_taken (field email)
	// "Ann <ann@example.org>"  invalid (field email)
	// "bob@example.org"        created
}
