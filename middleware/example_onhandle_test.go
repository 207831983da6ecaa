package middleware_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/components/cqrs"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"

	"github.com/claimbus/claimbus/middleware"
)

// The pipeline as the OnHandle of a cqrs command processor: the hooks see
// the command the processor decoded, and a ResultFunc gets every outcome.
func ExampleOnHandle() {
	logger := watermill.NopLogger{}
	pubSub := gochannel.NewGoChannel(gochannel.Config{BlockPublishUntilSubscriberAck: true}, logger)
	defer pubSub.Close()
	router, err := message.NewRouter(message.RouterConfig{}, logger)
	if err != nil {
		panic(err)
	}

	db := &users{emails: map[string]bool{}}
	runner, err := middleware.NewRunner(middleware.RunnerConfig{Middleware: []middleware.Middleware{
		middleware.Validate(),
		uniqueEmails(db),
	}})
	if err != nil {
		panic(err)
	}
	handler := cqrs.NewCommandHandler("register_user", func(ctx context.Context, cmd *RegisterUser) error {
		db.add(cmd.Email)
		p, _ := middleware.PipelineFromContext(ctx)
		fmt.Println("registered", cmd.Email, "as", p.CommandUUID)
		return nil
	})
	onHandle, err := middleware.OnHandle(middleware.HandlerConfig{
		Runner:   runner,
		Handlers: []cqrs.CommandHandler{handler},
		OnResult: func(_ context.Context, msg *message.Message, _ any, err error) error {
			var rej *middleware.Rejection
			switch {
			case errors.As(err, &rej):
				fmt.Printf("%s rejected: code=%s field=%s\n", msg.UUID, rej.Code, rej.Field)
			case err != nil:
				fmt.Printf("%s failed: %v\n", msg.UUID, err)
			default:
				fmt.Printf("%s done\n", msg.UUID)
			}
			return nil
		},
	})
	if err != nil {
		panic(err)
	}
	processor, err := cqrs.NewCommandProcessorWithConfig(router, cqrs.CommandProcessorConfig{
		GenerateSubscribeTopic: func(cqrs.CommandProcessorGenerateSubscribeTopicParams) (string, error) { return "commands", nil },
		SubscriberConstructor: func(cqrs.CommandProcessorSubscriberConstructorParams) (message.Subscriber, error) {
			return pubSub, nil
		},
		OnHandle:  onHandle,
		Marshaler: cqrs.JSONMarshaler{},
		Logger:    logger,
	})
	if err != nil {
		panic(err)
	}
	err = processor.AddHandlers(handler)
	if err != nil {
		panic(err)
	}

	ctx := context.Background()
	go func() {
		if err := router.Run(ctx); err != nil {
			panic(err)
		}
	}()
	defer router.Close()
	<-router.Running()

	bus, err := cqrs.NewCommandBusWithConfig(pubSub, cqrs.CommandBusConfig{
		GeneratePublishTopic: func(cqrs.CommandBusGeneratePublishTopicParams) (string, error) { return "commands", nil },
		Marshaler:            cqrs.JSONMarshaler{NewUUID: sequentialUUIDs()},
	})
	if err != nil {
		panic(err)
	}
	for _, email := range []string{"bob@example.org", "bob@example.org", ""} {
		if err := bus.Send(ctx, &RegisterUser{Email: email}); err != nil {
			panic(err)
		}
	}
	// Output:
	// registered bob@example.org as cmd-1
	// cmd-1 done
	// cmd-2 rejected: code=already_taken field=email
	// cmd-3 rejected: code=invalid field=email
}
