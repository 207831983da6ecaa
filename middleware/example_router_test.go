package middleware_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"sync"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/components/cqrs"
	"github.com/ThreeDotsLabs/watermill/message"
	wmiddleware "github.com/ThreeDotsLabs/watermill/message/router/middleware"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"

	"github.com/claimbus/claimbus/middleware"
)

// RegisterUser is the command of the examples.
type RegisterUser struct {
	Email string `json:"email"`
}

// Validate checks the command; its error names the field.
func (c *RegisterUser) Validate() error {
	if c.Email == "" {
		return &fieldErr{field: "email", msg: "email is required"}
	}
	return nil
}

// users is the examples' store of registered emails.
type users struct {
	mu     sync.Mutex
	emails map[string]bool
}

func (u *users) taken(email string) bool {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.emails[email]
}

func (u *users) add(email string) {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.emails[email] = true
}

// uniqueEmails halts a RegisterUser whose email is taken, as the
// uniqueness package's middleware does with claims.
func uniqueEmails(u *users) middleware.Middleware {
	return middleware.Hooks{OnBeforeDispatch: func(_ context.Context, p *middleware.Pipeline) {
		if cmd, ok := p.Command.(*RegisterUser); ok && u.taken(cmd.Email) {
			p.Halt(middleware.Reject(middleware.CodeAlreadyTaken, "email", "%s is already registered", cmd.Email))
		}
	}}
}

// exampleLogger logs to stdout without the varying time and duration.
func exampleLogger() *slog.Logger {
	return slog.New(slog.NewTextHandler(os.Stdout, &slog.HandlerOptions{
		ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
			if a.Key == slog.TimeKey || a.Key == "duration" {
				return slog.Attr{}
			}
			return a
		},
	}))
}

// sequentialUUIDs returns "cmd-1", "cmd-2", ... for deterministic output.
func sequentialUUIDs() func() string {
	var mu sync.Mutex
	n := 0
	return func() string {
		mu.Lock()
		defer mu.Unlock()
		n++
		return fmt.Sprintf("cmd-%d", n)
	}
}

// The pipeline plugged into a router the application already runs, with
// Watermill's Recoverer and CorrelationID middleware, on GoChannel.
func ExampleRouterMiddleware() {
	logger := watermill.NopLogger{}
	// Publish returns once the command is acked: the output is in order.
	pubSub := gochannel.NewGoChannel(gochannel.Config{BlockPublishUntilSubscriberAck: true}, logger)
	defer pubSub.Close()

	// The router the application already has.
	router, err := message.NewRouter(message.RouterConfig{}, logger)
	if err != nil {
		panic(err)
	}
	router.AddMiddleware(wmiddleware.Recoverer, wmiddleware.CorrelationID)

	// Plug the pipeline in, before the router runs.
	registry := middleware.NewRegistry(cqrs.JSONMarshaler{})
	if _, err := middleware.Register[RegisterUser](registry); err != nil {
		panic(err)
	}
	db := &users{emails: map[string]bool{}}
	runner, err := middleware.NewRunner(middleware.RunnerConfig{Middleware: []middleware.Middleware{
		middleware.Logging(middleware.LoggingConfig{Logger: exampleLogger()}),
		middleware.Validate(),
		uniqueEmails(db),
	}})
	if err != nil {
		panic(err)
	}
	pipeline, err := middleware.RouterMiddleware(middleware.RouterConfig{Runner: runner, Registry: registry})
	if err != nil {
		panic(err)
	}
	router.AddMiddleware(pipeline)

	// The application's handler, unchanged.
	router.AddConsumerHandler("register_user", "commands", pubSub, func(msg *message.Message) error {
		var cmd RegisterUser
		if err := json.Unmarshal(msg.Payload, &cmd); err != nil {
			return err
		}
		db.add(cmd.Email)
		fmt.Println("registered", cmd.Email)
		return nil
	})

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
		OnSend: func(params cqrs.CommandBusOnSendParams) error {
			wmiddleware.SetCorrelationID("signup-42", params.Message)
			return nil
		},
		Marshaler: cqrs.JSONMarshaler{NewUUID: sequentialUUIDs()},
	})
	if err != nil {
		panic(err)
	}
	for _, email := range []string{"ann@example.org", "ann@example.org", ""} {
		if err := bus.Send(ctx, &RegisterUser{Email: email}); err != nil {
			panic(err)
		}
	}
	// Output:
	// registered ann@example.org
	// level=INFO msg="command handled" command=middleware_test.RegisterUser command_id=cmd-1 correlation_id=signup-42 outcome=ok
	// level=INFO msg="command halted" command=middleware_test.RegisterUser command_id=cmd-2 correlation_id=signup-42 outcome=halted code=already_taken field=email error="already_taken: email: ann@example.org is already registered"
	// level=INFO msg="command halted" command=middleware_test.RegisterUser command_id=cmd-3 correlation_id=signup-42 outcome=halted code=invalid field=email error="invalid: email: email is required"
}
