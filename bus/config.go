package bus

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/components/cqrs"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/google/uuid"

	"github.com/claimbus/claimbus/middleware"
)

// Defaults of Config.
const (
	// defaultHandlerConcurrency is how many commands one bus handles at
	// once when Config.HandlerConcurrency is zero.
	defaultHandlerConcurrency = 64
	// defaultCloseTimeout is how long Close lets running handlers finish
	// before it cancels their context, when Config.CloseTimeout is zero.
	defaultCloseTimeout = 30 * time.Second
)

// defaultCommandTopic is the default Config.CommandTopic.
func defaultCommandTopic(commandName string) string { return "command." + commandName }

// defaultReplyTopic is the default Config.ReplyTopic: "reply." and the
// node id.
func defaultReplyTopic(nodeID string) string { return "reply." + nodeID }

// typeNames caches defaultName per dynamic type.
var typeNames sync.Map // reflect.Type → string

// defaultName is the name function of the default marshaler: the command's
// package name and type name, such as "commands.CreateStaff", for a value
// or a pointer alike (cqrs.FullyQualifiedStructName, cached per type).
func defaultName(cmd any) string {
	t := reflect.TypeOf(cmd)
	if n, ok := typeNames.Load(t); ok {
		return n.(string)
	}
	n := cqrs.FullyQualifiedStructName(cmd)
	typeNames.Store(t, n)
	return n
}

// defaultMarshaler returns the marshaler a bus uses when Config.Marshaler
// is nil: JSON payloads, names from defaultName, UUID message ids.
func defaultMarshaler() cqrs.CommandEventMarshaler {
	return cqrs.JSONMarshaler{GenerateName: defaultName, NewUUID: uuid.NewString}
}

// Config configures a Bus. The zero Config is a working in-process bus.
type Config struct {
	// Publisher publishes commands and Subscriber receives them; set both or
	// neither. Commands of one name go to the topic CommandTopic names.
	//
	// Default (both nil): in process. Dispatch and Send hand each command to
	// its handler inside this process and its reply straight back, through
	// the same marshaling, middleware and reply encoding as over a
	// transport. It behaves as a bus on a private GoChannel that nothing
	// else can reach would, but uses no GoChannel: no message copies, no
	// subscriber goroutines, no topics (see docs/bus.md for what
	// differs from a transport).
	//
	// The bus never closes a Publisher or Subscriber it is given; their
	// owner does, after Close. For several nodes use a transport with
	// competing consumers, such as bus/sqltransport: a GoChannel delivers
	// every message to every subscriber.
	Publisher  message.Publisher
	Subscriber message.Subscriber

	// ReplyPublisher publishes replies and ReplySubscriber receives them on
	// this bus's reply topic; set both or neither. Default: Publisher and
	// Subscriber. They need Publisher and Subscriber.
	ReplyPublisher  message.Publisher
	ReplySubscriber message.Subscriber

	// Marshaler encodes commands and names them; the name of a command
	// (Marshaler.Name, or Bus.CommandName) selects its handler and topic.
	// Default: JSON payloads, UUID message ids, and names made of the
	// command's package and type name, such as "commands.CreateStaff",
	// for a value or a pointer alike (cqrs.FullyQualifiedStructName).
	Marshaler cqrs.CommandEventMarshaler

	// Middleware runs around every command this bus handles, in this order,
	// through a middleware.Runner.
	Middleware []middleware.Middleware

	// FailureLog logs every command this bus handles that does not
	// succeed: rejections at Info, handler errors and panics at Error (see
	// middleware.FailureLog). Default: to slog.Default(). Turn it off when
	// a Logging middleware or the senders report outcomes already.
	FailureLog middleware.FailureLog

	// ReleaseTimeout bounds the after hooks of one command. Default
	// middleware.DefaultReleaseTimeout.
	ReleaseTimeout time.Duration

	// NodeID names this bus instance; its reply topic is ReplyTopic(NodeID),
	// so it must be unique among the buses sharing a transport. Default: a
	// random UUID (fine in process; a durable transport wants a stable id,
	// see bus/sqltransport).
	NodeID string

	// CommandTopic names the topic of a command from its name. Default
	// "command." and the name. Every node must agree on it.
	CommandTopic func(commandName string) string

	// ReplyTopic names this bus's reply topic from NodeID. Default
	// "reply." and the node id. Every node must agree on it.
	ReplyTopic func(nodeID string) string

	// HandlerConcurrency bounds how many commands this bus handles at once,
	// on as many goroutines, started on demand and kept until Close; more
	// commands wait (a Send blocks, a message stays unread). Default
	// 64. A transport may hand over fewer at once: bus/sqltransport hands
	// over at most 64 per topic.
	HandlerConcurrency int

	// CloseTimeout is how long Close waits for running handlers before it
	// cancels their context (and then waits for them to return). Default
	// 30s.
	CloseTimeout time.Duration

	// PoisonTopic, when set, receives (through Publisher) a command message
	// that cannot be handled, an unknown name or an undecodable payload,
	// when no sender waits for its reply; metadata "reason_poisoned" says
	// why (Watermill's middleware.ReasonForPoisonedKey). Default: such a
	// message is logged and dropped. A sender that waits gets an invalid
	// rejection instead (middleware.ErrInvalid).
	PoisonTopic string

	// OnSend, when set, is called with each command message Dispatch and
	// Send make, once its ids are set and before it is handed to a handler
	// or published, with the sender's ctx; it may add metadata, such as the
	// trace context of ctx (telemetry.Telemetry.OnSend). It must not keep
	// msg. Default nil.
	OnSend func(ctx context.Context, msg *message.Message)

	// Logger logs what the bus cannot return to a caller (a reply that
	// cannot be published, a dropped message). Default: slog.Default()
	// through watermill.NewSlogLogger; watermill.NopLogger{} silences it.
	Logger watermill.LoggerAdapter
}

// validate reports every problem of the configuration.
func (c Config) validate() error {
	var errs []error
	if (c.Publisher == nil) != (c.Subscriber == nil) {
		errs = append(errs, errors.New("bus: Publisher and Subscriber must be set together"))
	}
	if (c.ReplyPublisher == nil) != (c.ReplySubscriber == nil) {
		errs = append(errs, errors.New("bus: ReplyPublisher and ReplySubscriber must be set together"))
	}
	if c.ReplyPublisher != nil && c.Publisher == nil {
		errs = append(errs, errors.New("bus: ReplyPublisher and ReplySubscriber need Publisher and Subscriber"))
	}
	if c.PoisonTopic != "" && c.Publisher == nil {
		errs = append(errs, errors.New("bus: PoisonTopic needs a Publisher"))
	}
	for i, m := range c.Middleware {
		if m == nil {
			errs = append(errs, fmt.Errorf("bus: Middleware[%d] is nil", i))
		}
	}
	if c.ReleaseTimeout < 0 {
		errs = append(errs, fmt.Errorf("bus: ReleaseTimeout is negative (%v)", c.ReleaseTimeout))
	}
	if c.HandlerConcurrency < 0 {
		errs = append(errs, fmt.Errorf("bus: HandlerConcurrency is negative (%d)", c.HandlerConcurrency))
	}
	if c.CloseTimeout < 0 {
		errs = append(errs, fmt.Errorf("bus: CloseTimeout is negative (%v)", c.CloseTimeout))
	}
	return errors.Join(errs...)
}

// withDefaults returns c with every zero field set to its default.
func (c Config) withDefaults() Config {
	if c.Marshaler == nil {
		c.Marshaler = defaultMarshaler()
	}
	if c.ReplyPublisher == nil {
		c.ReplyPublisher, c.ReplySubscriber = c.Publisher, c.Subscriber
	}
	if c.NodeID == "" {
		c.NodeID = uuid.NewString()
	}
	if c.CommandTopic == nil {
		c.CommandTopic = defaultCommandTopic
	}
	if c.ReplyTopic == nil {
		c.ReplyTopic = defaultReplyTopic
	}
	c.ReleaseTimeout = cmp.Or(c.ReleaseTimeout, middleware.DefaultReleaseTimeout)
	c.HandlerConcurrency = cmp.Or(c.HandlerConcurrency, defaultHandlerConcurrency)
	c.CloseTimeout = cmp.Or(c.CloseTimeout, defaultCloseTimeout)
	if c.Logger == nil {
		c.Logger = watermill.NewSlogLogger(slog.Default())
	}
	return c
}
