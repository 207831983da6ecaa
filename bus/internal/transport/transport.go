// Package transport holds what the transports of the bus (sqltransport,
// natstransport) share.
package transport

import (
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/claimbus/claimbus/bus"
)

// BusConfig returns cfg with a transport's endpoints set: pub publishing
// commands and replies, commands and replies subscribing to each, and the
// node id. It is the one list of the fields of bus.Config a transport
// fills.
func BusConfig(cfg bus.Config, pub message.Publisher, commands, replies message.Subscriber, nodeID string) bus.Config {
	cfg.Publisher, cfg.Subscriber = pub, commands
	cfg.ReplyPublisher, cfg.ReplySubscriber = pub, replies
	cfg.NodeID = nodeID
	return cfg
}
