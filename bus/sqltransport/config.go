package sqltransport

import (
	"cmp"
	"errors"
	"fmt"
	"regexp"
	"time"

	"github.com/ThreeDotsLabs/watermill"
)

// Defaults of Config.
const (
	// DefaultPollInterval is how often an idle subscription looks for
	// messages when notifications are on: a backstop, since a notification
	// wakes it as soon as a message commits.
	DefaultPollInterval = time.Second
	// DefaultPollIntervalNoNotify is the PollInterval of command
	// subscriptions when notifications are off.
	DefaultPollIntervalNoNotify = 100 * time.Millisecond
	// DefaultReplyPollIntervalNoNotify is the ReplyPollInterval when
	// notifications are off: a reply should not wait on a slow poll.
	DefaultReplyPollIntervalNoNotify = 10 * time.Millisecond
	// DefaultAckDeadline is how long a message may stay unacked before the
	// transport gives it to another consumer.
	DefaultAckDeadline = 30 * time.Second
	// DefaultRetryInterval is how long a subscription waits after a
	// database error.
	DefaultRetryInterval = time.Second
	// DefaultTablePrefix starts the name of every table of the transport.
	DefaultTablePrefix = "claimbus_"
)

// NotifyChannel is the PostgreSQL channel the tables' insert trigger
// notifies, with the table's name as payload.
const NotifyChannel = "claimbus_wake"

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
	// looks for messages again. Default DefaultPollInterval, or
	// DefaultPollIntervalNoNotify when DisableNotify is set.
	PollInterval time.Duration

	// ReplyPollInterval is PollInterval for the reply subscription. Default
	// PollInterval, or DefaultReplyPollIntervalNoNotify when DisableNotify
	// is set.
	ReplyPollInterval time.Duration

	// AckDeadline is how long a message may stay unacked before the
	// transport rolls its delivery back and hands it to a consumer again.
	// Longer than the slowest handler, or a command is handled twice.
	// Default DefaultAckDeadline.
	AckDeadline time.Duration

	// RetryInterval is how long a subscription waits after a database
	// error. Default DefaultRetryInterval.
	RetryInterval time.Duration

	// TablePrefix starts the name of every table, followed by the topic.
	// Default DefaultTablePrefix. Letters, digits and _ only.
	TablePrefix string

	// Logger logs the transport's errors. Default watermill.NopLogger.
	Logger watermill.LoggerAdapter
}

var validPrefix = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// Validate reports every problem of the configuration.
func (c Config) Validate() error {
	var errs []error
	if c.NodeID == "" {
		errs = append(errs, errors.New("sqltransport: NodeID is required"))
	} else if !validName.MatchString(c.NodeID) {
		errs = append(errs, fmt.Errorf("sqltransport: %w: NodeID %q", ErrInvalidTopic, c.NodeID))
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
		c.PollInterval = cmp.Or(c.PollInterval, DefaultPollIntervalNoNotify)
		c.ReplyPollInterval = cmp.Or(c.ReplyPollInterval, DefaultReplyPollIntervalNoNotify)
	} else {
		c.PollInterval = cmp.Or(c.PollInterval, DefaultPollInterval)
		c.ReplyPollInterval = cmp.Or(c.ReplyPollInterval, c.PollInterval)
	}
	c.AckDeadline = cmp.Or(c.AckDeadline, DefaultAckDeadline)
	c.RetryInterval = cmp.Or(c.RetryInterval, DefaultRetryInterval)
	c.TablePrefix = cmp.Or(c.TablePrefix, DefaultTablePrefix)
	if c.Logger == nil {
		c.Logger = watermill.NopLogger{}
	}
	return c
}
