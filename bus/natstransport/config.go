package natstransport

import (
	"cmp"
	"errors"
	"fmt"
	"regexp"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/nats-io/nats.go"
)

// Defaults of Config.
const (
	// defaultStream is the name of the JetStream stream of the transport.
	defaultStream = "CLAIMBUS"
	// defaultSubjectPrefix starts every subject of the transport.
	defaultSubjectPrefix = "claimbus"
	// defaultDurablePrefix starts the name of every consumer of the
	// transport.
	defaultDurablePrefix = "claimbus"
	// defaultAckWait is how long the server waits for a sign of life (an
	// ack or a renewal) of the node a message was delivered to before it
	// delivers the message again: how soon a dead node's commands come
	// back.
	defaultAckWait = 5 * time.Second
	// defaultMaxAckPending is how many messages of one topic may be
	// delivered and unacked at once, across every node.
	defaultMaxAckPending = 256
	// defaultRequestTimeout bounds each request to JetStream.
	defaultRequestTimeout = 5 * time.Second
	// defaultReconnectWait is the pause between two attempts to reconnect.
	defaultReconnectWait = 250 * time.Millisecond
	// defaultReplicas is how many servers keep a copy of the stream.
	defaultReplicas = 1
)

// maxReplicas is the most replicas JetStream allows.
const maxReplicas = 5

var (
	validStream = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)
	validPrefix = regexp.MustCompile(`^[A-Za-z0-9_-]{1,32}$`)
	validToken  = regexp.MustCompile(`^[A-Za-z0-9_-]+$`)
)

// Config configures a Transport. NodeID is required; every other field has
// a default, and a value that cannot work fails New rather than being
// replaced.
type Config struct {
	// NodeID names this node: its replies come on the reply topic named
	// from it (bus.Config.ReplyTopic), through a durable consumer named from
	// that topic. Required: unique among the live nodes of one stream, and
	// stable across restarts, or each restart leaves a consumer behind.
	NodeID string

	// Stream names the JetStream stream that holds every message of the
	// transport, created by New if it is missing. Default "CLAIMBUS".
	// Letters, digits, - and _ only, at most 64 bytes.
	Stream string

	// SubjectPrefix starts every subject: a topic's subject is the prefix,
	// a dot and the topic's subject form (see Transport.Subject), and the
	// stream captures SubjectPrefix.>. Default "claimbus". Tokens
	// of letters, digits, - and _, separated by dots.
	SubjectPrefix string

	// DurablePrefix starts the name of every durable consumer (see
	// Transport.ConsumerName). Default "claimbus". Letters,
	// digits, - and _ only, at most 32 bytes.
	DurablePrefix string

	// AckWait is how long the server waits for a sign of life of the node
	// a message was delivered to before it delivers the message again, to
	// any node. A node renews every message it holds (an in-progress ack)
	// every AckWait/3 until the bus acks it, so a handler may run longer
	// than AckWait; a node that dies or loses its connection stops
	// renewing, and its messages come back within AckWait. Keep it well
	// below the deadlines of the senders, so that a dead node's command is
	// handled elsewhere in time. Every node of a stream must agree: it is
	// part of each consumer. Default 5 s.
	AckWait time.Duration

	// MaxAckPending bounds the messages of one topic delivered and not yet
	// acked, across every node; the server holds the rest back. The
	// delivered ones that wait in a busy node's client for the bus to take
	// them are not renewed yet, so keep MaxAckPending / (nodes ×
	// bus.Config.HandlerConcurrency) × the slowest handler below AckWait,
	// or such a message is delivered again while it waits. Every node must
	// agree. Default 256.
	MaxAckPending int

	// RequestTimeout bounds each request to JetStream: a publish waiting
	// for the stream's acknowledgement, the ack of a command, the creation
	// of the stream and of a consumer. Default 5 s.
	RequestTimeout time.Duration

	// ReconnectWait is the pause between two attempts to reconnect after the
	// connection is lost; the transport reconnects for as long as it is
	// open. Default 250 ms.
	ReconnectWait time.Duration

	// Replicas is how many servers of a NATS cluster keep the stream.
	// Default 1; at most 5, and no more than the cluster has.
	Replicas int

	// MemoryStorage keeps the stream in the servers' memory instead of on
	// disk: faster, and lost when a server restarts. Default false (file
	// storage).
	MemoryStorage bool

	// NatsOptions are more options of the NATS connection (credentials,
	// TLS, a name, ...), applied after the transport's own (reconnect
	// forever, no reconnect buffer, ReconnectWait, logging handlers). An
	// option that changes those changes what the package documents.
	// Default none.
	NatsOptions []nats.Option

	// Logger logs the transport's errors and the connection's losses and
	// reconnections. Default watermill.NopLogger.
	Logger watermill.LoggerAdapter
}

// validate reports every problem of the configuration.
func (c Config) validate() error {
	var errs []error
	if c.NodeID == "" {
		errs = append(errs, errors.New("natstransport: NodeID is required"))
	}
	if c.Stream != "" && !validStream.MatchString(c.Stream) {
		errs = append(errs, fmt.Errorf("natstransport: Stream %q: 1 to 64 letters, digits, - or _", c.Stream))
	}
	if c.SubjectPrefix != "" && !validSubjectPrefix(c.SubjectPrefix) {
		errs = append(errs, fmt.Errorf("natstransport: SubjectPrefix %q: tokens of letters, digits, - and _, separated by dots", c.SubjectPrefix))
	}
	if c.DurablePrefix != "" && !validPrefix.MatchString(c.DurablePrefix) {
		errs = append(errs, fmt.Errorf("natstransport: DurablePrefix %q: 1 to 32 letters, digits, - or _", c.DurablePrefix))
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{
		{"AckWait", c.AckWait},
		{"RequestTimeout", c.RequestTimeout},
		{"ReconnectWait", c.ReconnectWait},
	} {
		if d.v < 0 {
			errs = append(errs, fmt.Errorf("natstransport: %s is negative (%v)", d.name, d.v))
		}
	}
	if c.AckWait > 0 && c.AckWait < time.Millisecond {
		errs = append(errs, fmt.Errorf("natstransport: AckWait %v is below a millisecond", c.AckWait))
	}
	if c.MaxAckPending < 0 {
		errs = append(errs, fmt.Errorf("natstransport: MaxAckPending is negative (%d)", c.MaxAckPending))
	}
	if c.Replicas < 0 || c.Replicas > maxReplicas {
		errs = append(errs, fmt.Errorf("natstransport: Replicas %d: from 1 to %d", c.Replicas, maxReplicas))
	}
	for i, o := range c.NatsOptions {
		if o == nil {
			errs = append(errs, fmt.Errorf("natstransport: NatsOptions[%d] is nil", i))
		}
	}
	return errors.Join(errs...)
}

func validSubjectPrefix(p string) bool {
	if len(p) > 64 {
		return false
	}
	start := 0
	for i := 0; i <= len(p); i++ {
		if i == len(p) || p[i] == '.' {
			if !validToken.MatchString(p[start:i]) {
				return false
			}
			start = i + 1
		}
	}
	return true
}

// withDefaults returns c with every zero field set to its default.
func (c Config) withDefaults() Config {
	c.Stream = cmp.Or(c.Stream, defaultStream)
	c.SubjectPrefix = cmp.Or(c.SubjectPrefix, defaultSubjectPrefix)
	c.DurablePrefix = cmp.Or(c.DurablePrefix, defaultDurablePrefix)
	c.AckWait = cmp.Or(c.AckWait, defaultAckWait)
	c.MaxAckPending = cmp.Or(c.MaxAckPending, defaultMaxAckPending)
	c.RequestTimeout = cmp.Or(c.RequestTimeout, defaultRequestTimeout)
	c.ReconnectWait = cmp.Or(c.ReconnectWait, defaultReconnectWait)
	c.Replicas = cmp.Or(c.Replicas, defaultReplicas)
	if c.Logger == nil {
		c.Logger = watermill.NopLogger{}
	}
	return c
}
