package middleware

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"

	"github.com/ThreeDotsLabs/watermill/message"
)

// RouterConfig configures RouterMiddleware.
type RouterConfig struct {
	// Runner runs the middleware around each command. Required.
	Runner *Runner
	// Registry names and decodes the commands the middleware runs; messages
	// carrying other names pass through untouched (see RejectUnknown).
	// Required. Register the commands before RouterMiddleware, which checks
	// them against the Runner's middleware (see CommandTyper); a type added
	// later is decoded but not checked.
	Registry *Registry
	// OnResult, when set, receives the outcome of every command the
	// middleware ran or rejected; see ResultFunc. Default: none.
	OnResult ResultFunc
	// AckHandlerErrors acks a command whose handler failed (returned an
	// error or panicked) or was skipped because its context was done,
	// instead of returning the error to the router, which nacks it (and
	// GoChannel redelivers it at once, forever). Set it when OnResult
	// answers the sender: a handler error is then an answer, not a reason to
	// run the command again. Default false.
	AckHandlerErrors bool
	// RejectUnknown rejects a message whose command name is missing or not
	// in the Registry as invalid (acked, and reported to OnResult) instead
	// of passing it to the next handler. Set it on a handler whose topic
	// carries only commands of the Registry. Default false.
	RejectUnknown bool
	// ReturnDecodeErrors returns an undecodable message's error (matching
	// ErrUndecodable) to the router instead of rejecting it as invalid and
	// acking it. Set it only when a middleware outside this one, such as
	// Watermill's PoisonQueue, takes such messages aside: otherwise the
	// message is redelivered forever. Default false.
	ReturnDecodeErrors bool
	// Logger logs the messages the middleware rejects without running them
	// (unknown with RejectUnknown, undecodable). Default slog.Default().
	Logger *slog.Logger
}

// Validate reports every problem of the configuration, among them each
// command type a middleware of the Runner acts on (see CommandTyper) that
// no type of the Registry matches (ErrUnhandledCommandType): register the
// commands before building the middleware.
func (c RouterConfig) Validate() error {
	var errs []error
	if c.Runner == nil {
		errs = append(errs, errors.New("middleware: RouterConfig.Runner is nil"))
	}
	if c.Registry == nil {
		errs = append(errs, errors.New("middleware: RouterConfig.Registry is nil"))
	}
	if err := repliesWithoutAck(c.OnResult, c.AckHandlerErrors); err != nil {
		errs = append(errs, fmt.Errorf("middleware: RouterConfig: %w", err))
	}
	if c.Runner != nil && c.Registry != nil {
		if err := CheckCommandTypes(c.Runner.mws, c.Registry.commandTypes()); err != nil {
			errs = append(errs, fmt.Errorf("middleware: RouterConfig: register every command type the Runner's middleware acts on in the Registry first: %w", err))
		}
	}
	return errors.Join(errs...)
}

// RouterMiddleware returns a Watermill router middleware that runs the
// pipeline around the next handler for every message carrying a command
// of cfg.Registry, for a router the user built (add it with
// Router.AddMiddleware or Handler.AddMiddleware before the router runs:
// Watermill ignores middleware added to a running handler).
//
// For each message it reads the command name from the metadata ("name"),
// decodes the payload into a fresh command with the Registry, builds the
// Pipeline (see Registry.Pipeline) and runs the Runner's hooks around
// next. The next handler gets the message with its context replaced by the
// handler context of the run (p.Context(), which hooks may have replaced,
// carrying the pipeline); it decodes the payload again itself, as a cqrs
// processor does.
//
// Outcomes: a message with an unknown name passes to next untouched (see
// RejectUnknown), logged at Warn once per name; an undecodable payload is rejected as invalid (ErrInvalid,
// also matching ErrUndecodable locally), acked and reported to OnResult,
// never redelivered (see ReturnDecodeErrors); a halted command is acked and
// the messages next produced are dropped; a failed command's error goes to
// the router (nack) unless AckHandlerErrors; OnResult's error goes to the
// router in every case.
func RouterMiddleware(cfg RouterConfig) (message.HandlerMiddleware, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	a := &routerAdapter{
		cfg:    cfg,
		out:    newOutcome(cfg.OnResult, cfg.AckHandlerErrors),
		logger: cfg.Logger,
	}
	if a.logger == nil {
		a.logger = slog.Default()
	}
	return a.middleware, nil
}

type routerAdapter struct {
	cfg    RouterConfig
	out    outcome
	logger *slog.Logger
	// unknown holds the command names warned about (see warnUnknown), up
	// to maxUnknownWarned.
	unknown      sync.Map
	unknownCount atomic.Int32
}

// maxUnknownWarned bounds the names warnUnknown remembers: names come
// from messages, which anybody may send.
const maxUnknownWarned = 100

// warnUnknown logs, once per name, a message passed on without the
// pipeline because its command name is not in the Registry: a command
// registered under another name (a Registry whose marshaler names
// commands otherwise than the processor's) runs unclaimed, and must not
// do so silently.
func (a *routerAdapter) warnUnknown(msg *message.Message) {
	name := a.cfg.Registry.marshaler.NameFromMessage(msg)
	if name == "" || a.unknownCount.Load() >= maxUnknownWarned {
		return
	}
	if _, seen := a.unknown.LoadOrStore(name, struct{}{}); seen {
		return
	}
	a.unknownCount.Add(1)
	a.logger.LogAttrs(msg.Context(), slog.LevelWarn, "command not in the Registry runs without the pipeline",
		slog.String("command", name),
		slog.String("fix", "register its type, or give the Registry the marshaler the senders use (names must agree); set RejectUnknown if the topic carries only commands of the Registry"))
}

func (a *routerAdapter) middleware(next message.HandlerFunc) message.HandlerFunc {
	return func(msg *message.Message) ([]*message.Message, error) {
		p, err := a.cfg.Registry.Pipeline(msg)
		if err != nil {
			if errors.Is(err, ErrUnknownCommand) && !a.cfg.RejectUnknown {
				a.warnUnknown(msg)
				return next(msg)
			}
			if errors.Is(err, ErrUndecodable) && a.cfg.ReturnDecodeErrors {
				return nil, err
			}
			return nil, a.reject(msg, err)
		}

		var produced []*message.Message
		err = a.out.run(msg.Context(), a.cfg.Runner, msg, p, func(ctx context.Context, _ *Pipeline) (any, error) {
			orig := msg.Context()
			msg.SetContext(ctx)
			defer msg.SetContext(orig)
			var herr error
			produced, herr = next(msg)
			return nil, herr
		})
		if err != nil || p.err != nil || p.halted {
			return nil, err
		}
		return produced, nil
	}
}

// reject acks msg, which is not a command this middleware can run, after
// logging it and reporting it to OnResult; err is Registry.Pipeline's, an invalid
// rejection.
func (a *routerAdapter) reject(msg *message.Message, err error) error {
	a.logger.LogAttrs(msg.Context(), slog.LevelError, "command rejected without running",
		slog.String("message_uuid", msg.UUID),
		slog.String("command", a.cfg.Registry.marshaler.NameFromMessage(msg)),
		slog.String("error", err.Error()))
	ctx, cancel := context.WithTimeout(context.WithoutCancel(msg.Context()), a.cfg.Runner.releaseTimeout)
	defer cancel()
	return a.out.result(ctx, msg, nil, err)
}
