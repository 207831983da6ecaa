// Package wire is how a command's outcome crosses processes: the metadata
// keys of replies and the encoding of a command's error. The bus and the
// middleware package's requestreply glue both use it, so that a rejection
// reads the same whichever of them carried it.
//
// The error types it encodes are middleware's (middleware.Rejection,
// middleware.RemoteError), registered by middleware (Register).
package wire

import (
	"encoding/json"
	"fmt"

	"github.com/ThreeDotsLabs/watermill/message"
)

// The metadata keys of claimbus messages, each defined once here and
// exported where users meet it (bus.MetadataPoisonReason, ...), whose docs
// are their contract; the other keys are documented here.
const (
	// MetadataCorrelationID is the key of the correlation id: the key
	// Watermill's CorrelationID middleware uses.
	MetadataCorrelationID = "correlation_id"
	// MetadataCausationID is the key of the causation id.
	MetadataCausationID = "causation_id"
	// MetadataCommandName is the key of the command's name: the key
	// Watermill's cqrs marshalers use.
	MetadataCommandName = "name"
	// MetadataReplyTo, on a command message, is the reply topic of the bus
	// that waits for the outcome; a command from Send has none.
	MetadataReplyTo = "claimbus_reply_to"
	// MetadataCommandID, on a reply message, is the UUID of the command it
	// answers: the operation id its waiter is found by.
	MetadataCommandID = "claimbus_command_id"
	// MetadataDeadline, on a command message from Dispatch whose ctx has a
	// deadline, is that deadline (RFC 3339 with nanoseconds, UTC): the bus
	// that handles the command does not start its handler after it (see
	// bus.Bus.Dispatch). Send sets none: nobody waits for its outcome.
	MetadataDeadline = "claimbus_deadline"
	// MetadataPoisonReason is bus.MetadataPoisonReason: the key of
	// Watermill's PoisonQueue.
	MetadataPoisonReason = "reason_poisoned"
	// MetadataError, on a reply message, is the command's error as
	// MarshalError encodes it; absent on success. It is the key
	// replies between the nodes of a bus carry; requestreply replies built
	// by middleware.RequestReply carry it too. Replies also keep the key
	// they had before (legacyMetadataError) readable.
	MetadataError = "claimbus_error"
)

// legacyMetadataError is the key middleware.RequestReply's replies had before it
// shared MetadataError: ReplyError still reads it, so that a sender reads
// the rejections of a replier not yet upgraded.
const legacyMetadataError = "_claimbus_error"

// Rejection is the wire form of a rejection: the fields of
// middleware.Rejection, which is convertible to and from it.
type Rejection struct {
	Code    string `json:"code"`
	Field   string `json:"field,omitempty"`
	Message string `json:"message,omitempty"`
}

// Types are the error types of the encoding: middleware defines them
// (middleware.Rejection, middleware.RemoteError), so that users see their
// names, and registers them when it is initialised (wire cannot import
// middleware, which imports it).
type Types struct {
	// Find returns the rejection in err's chain in its wire form.
	Find func(err error) (*Rejection, bool)
	// Rejection returns the error a decoded rejection is.
	Rejection func(*Rejection) error
	// Remote returns the error a decoded message is.
	Remote func(message string) error
}

var types Types

// Register sets the error types; middleware calls it in its init.
func Register(t Types) { types = t }

// wireError is how a command's error crosses the wire: a rejection as data,
// any other error as its message.
type wireError struct {
	Rejection *Rejection `json:"rejection,omitempty"`
	Message   string     `json:"message,omitempty"`
}

// MarshalError encodes err for a reply. A *Rejection anywhere in err's
// chain is kept as data (its cause, if wrapped beside it, stays on this
// node); any other error keeps its message. A nil err encodes as nil.
func MarshalError(err error) []byte {
	if err == nil {
		return nil
	}
	w := wireError{Message: err.Error()}
	if rej, ok := types.Find(err); ok {
		w.Rejection = rej
	}
	b, mErr := json.Marshal(w)
	if mErr != nil {
		// Only strings are marshalled: this cannot fail. Keep the message.
		b, _ = json.Marshal(wireError{Message: err.Error()})
	}
	return b
}

// UnmarshalError decodes what MarshalError encoded: a
// *middleware.Rejection, so that errors.Is and errors.As hold on the
// sender's side, or a *middleware.RemoteError. An empty b decodes as nil.
func UnmarshalError(b []byte) error {
	if len(b) == 0 {
		return nil
	}
	var w wireError
	if err := json.Unmarshal(b, &w); err != nil {
		return fmt.Errorf("middleware: undecodable error in reply: %w", err)
	}
	if w.Rejection != nil && w.Rejection.Code != "" {
		return types.Rejection(w.Rejection)
	}
	return types.Remote(w.Message)
}

// SetReplyError sets the encoded error errb (see MarshalError) on a reply;
// an empty errb sets nothing.
func SetReplyError(msg *message.Message, errb []byte) {
	if len(errb) > 0 {
		msg.Metadata.Set(MetadataError, string(errb))
	}
}

// ReplyError returns the encoded error a reply carries, or nil.
func ReplyError(msg *message.Message) []byte {
	if e := msg.Metadata.Get(MetadataError); e != "" {
		return []byte(e)
	}
	if e := msg.Metadata.Get(legacyMetadataError); e != "" {
		return []byte(e)
	}
	return nil
}
