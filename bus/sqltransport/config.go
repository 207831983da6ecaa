package sqltransport

import (
	"cmp"
	"errors"
	"fmt"
	"regexp"
	"time"

	"github.com/ThreeDotsLabs/watermill"

	"github.com/claimbus/claimbus/bus"
)

// Defaults of Config.
const (
	// defaultPollInterval is how often an idle subscription looks for
	// messages when notifications are on: a backstop, since a notification
	// wakes it as soon as a message commits.
	defaultPollInterval = time.Second
	// defaultPollIntervalNoNotify is the PollInterval of command
	// subscriptions when notifications are off.
	defaultPollIntervalNoNotify = 100 * time.Millisecond
	// defaultReplyPollIntervalNoNotify is the ReplyPollInterval when
	// notifications are off: a reply should not wait on a slow poll.
	defaultReplyPollIntervalNoNotify = 10 * time.Millisecond
	// defaultAckDeadline is how long a message may stay unacked before the
	// transport gives it to another consumer.
	defaultAckDeadline = 30 * time.Second
	// minAckDeadline keeps a lease (a third of it) and its renewals (a
	// third of the lease) long enough to be worth a round trip.
	minAckDeadline = 30 * time.Millisecond
	// defaultRetryInterval is how long a subscription waits after a
	// database error.
	defaultRetryInterval = time.Second
	// defaultTablePrefix starts the name of every table of the transport.
	defaultTablePrefix = "claimbus_"
)

// notifyChannel is the PostgreSQL channel the tables' insert trigger
// notifies, with the table's name as payload.
const notifyChannel = "claimbus_wake"

// validName is the rule for topics, which name tables: Watermill's SQL
// rule without "$", which would end the dollar-quoted DDL.
var validName = regexp.MustCompile(`^[A-Za-z0-9\-:._]+$`)

// Config configures a Transport.
type Config struct {
	// NodeID names this node; its replies come on its own topic, named from
	// it. Required: unique among the live nodes of one database, and stable
	// across restarts (each node id has a reply table). Letters, digits and
	// - : . _ only.
	NodeID string

	// DisableNotify turns off LISTEN/NOTIFY wake-ups: subscriptions then
	// find messages by polling alone. Default false: one connection per
	// transport LISTENs, and a subscription looks for messages as soon as
	// one commits in its table.
	DisableNotify bool

	// PollInterval is how long an idle command subscription waits before it
	// looks for messages again. Default 1s (a backstop: a
	// notification wakes it as soon as a message commits), or 100ms when
	// DisableNotify is set.
	PollInterval time.Duration

	// ReplyPollInterval is PollInterval for the reply subscription. Default
	// PollInterval, or 10ms when DisableNotify is set: a reply should not
	// wait on a slow poll.
	ReplyPollInterval time.Duration

	// AckDeadline is how long a message may stay unacked after its
	// hand-over to the consumer before the transport stops renewing its
	// lease, so that a consumer gets it again when the lease ends (a
	// third of AckDeadline, at most 5s; the lease of a node that died ends
	// the same way). Longer than the slowest handler, or a command is
	// handled twice. Default 30s, at least 30ms.
	AckDeadline time.Duration

	// RetryInterval is how long a subscription waits after a database
	// error. Default 1s.
	RetryInterval time.Duration

	// TablePrefix starts the name of every table, followed by the topic.
	// Default "claimbus_". Letters, digits and _ only.
	TablePrefix string

	// Logger logs the transport's errors. Default watermill.NopLogger.
	Logger watermill.LoggerAdapter
}

var validPrefix = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// validate reports every problem of the configuration.
func (c Config) validate() error {
	var errs []error
	if c.NodeID == "" {
		errs = append(errs, errors.New("sqltransport: NodeID is required"))
	} else if !validName.MatchString(c.NodeID) {
		errs = append(errs, fmt.Errorf("sqltransport: %w: NodeID %q", bus.ErrInvalidTopic, c.NodeID))
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{
		{"PollInterval", c.PollInterval},
		{"ReplyPollInterval", c.ReplyPollInterval},
		{"AckDeadline", c.AckDeadline},
		{"RetryInterval", c.RetryInterval},
	} {
		if d.v < 0 {
			errs = append(errs, fmt.Errorf("sqltransport: %s is negative (%v)", d.name, d.v))
		}
	}
	if c.AckDeadline > 0 && c.AckDeadline < minAckDeadline {
		errs = append(errs, fmt.Errorf("sqltransport: AckDeadline %v is shorter than %v", c.AckDeadline, minAckDeadline))
	}
	if c.TablePrefix != "" && !validPrefix.MatchString(c.TablePrefix) {
		errs = append(errs, fmt.Errorf("sqltransport: TablePrefix %q: letters, digits and _ only", c.TablePrefix))
	}
	if len(c.TablePrefix) > 30 {
		errs = append(errs, fmt.Errorf("sqltransport: TablePrefix %q is longer than 30 bytes", c.TablePrefix))
	}
	return errors.Join(errs...)
}

// withDefaults returns c with every zero field set to its default.
func (c Config) withDefaults() Config {
	if c.DisableNotify {
		c.PollInterval = cmp.Or(c.PollInterval, defaultPollIntervalNoNotify)
		c.ReplyPollInterval = cmp.Or(c.ReplyPollInterval, defaultReplyPollIntervalNoNotify)
	} else {
		c.PollInterval = cmp.Or(c.PollInterval, defaultPollInterval)
		c.ReplyPollInterval = cmp.Or(c.ReplyPollInterval, c.PollInterval)
	}
	c.AckDeadline = cmp.Or(c.AckDeadline, defaultAckDeadline)
	c.RetryInterval = cmp.Or(c.RetryInterval, defaultRetryInterval)
	c.TablePrefix = cmp.Or(c.TablePrefix, defaultTablePrefix)
	if c.Logger == nil {
		c.Logger = watermill.NopLogger{}
	}
	return c
}
