// Package wire is how a command's outcome crosses processes: the metadata
// keys of replies and the encoding of a command's error. The bus and the
// middleware package's requestreply glue both use it, so that a rejection
// reads the same whichever of them carried it.
//
// Its types are re-exported by middleware (middleware.Rejection,
// middleware.RemoteError); users name them there.
package wire

import (
	"encoding/json"
	"errors"
	"fmt"

	"github.com/ThreeDotsLabs/watermill/message"
)

// The metadata keys of claimbus messages, each defined once here and
// exported where users meet it (middleware.MetadataCorrelationID,
// bus.MetadataReplyTo, ...), whose docs are their contract.
const (
	// MetadataCorrelationID is middleware.MetadataCorrelationID: the key
	// Watermill's CorrelationID middleware uses.
	MetadataCorrelationID = "correlation_id"
	// MetadataCausationID is middleware.MetadataCausationID.
	MetadataCausationID = "causation_id"
	// MetadataCommandName is middleware.MetadataCommandName: the key
	// Watermill's cqrs marshalers use.
	MetadataCommandName = "name"
	// MetadataReplyTo is bus.MetadataReplyTo.
	MetadataReplyTo = "claimbus_reply_to"
	// MetadataCommandID is bus.MetadataCommandID.
	MetadataCommandID = "claimbus_command_id"
	// MetadataDeadline is bus.MetadataDeadline.
	MetadataDeadline = "claimbus_deadline"
	// MetadataPoisonReason is bus.MetadataPoisonReason: the key of
	// Watermill's PoisonQueue.
	MetadataPoisonReason = "reason_poisoned"
	// MetadataError, on a reply message, is the command's error as
	// MarshalError encodes it; absent on success. It is the bus's
	// documented key (bus.MetadataError), which replies between the nodes
	// of a bus carry; requestreply replies built by
	// middleware.ReplyMarshaler carry it too (middleware.MetadataError).
	MetadataError = "claimbus_error"
)

// legacyMetadataError is the key middleware.ReplyMarshaler wrote before it
// shared MetadataError: ReplyError still reads it, so that a sender reads
// the rejections of a replier not yet upgraded.
const legacyMetadataError = "_claimbus_error"

// Rejection is a structured business rejection of a command; see
// middleware.Rejection, its exported name, for its contract.
type Rejection struct {
	// Code says why, such as "already_taken"; errors.Is matches by it.
	Code string `json:"code"`
	// Field names the command field concerned, if any, such as "email".
	Field string `json:"field,omitempty"`
	// Message is for people.
	Message string `json:"message,omitempty"`
}

// Error returns "code: field: message", leaving out the empty parts.
func (r *Rejection) Error() string {
	s := r.Code
	if r.Field != "" {
		s += ": " + r.Field
	}
	if r.Message != "" {
		s += ": " + r.Message
	}
	return s
}

// Is reports whether target is a *Rejection with the same code.
func (r *Rejection) Is(target error) bool {
	t, ok := target.(*Rejection)
	return ok && t.Code == r.Code
}

// RemoteError is a command's error that is not a rejection, as the sender
// gets it back from a handler that may run on another node: its message
// only, since error types do not cross a wire.
type RemoteError struct {
	// Message is the handler's error message (err.Error()).
	Message string
}

// Error returns the handler's error message.
func (e *RemoteError) Error() string { return e.Message }

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
	var rej *Rejection
	if errors.As(err, &rej) {
		w.Rejection = rej
	}
	b, mErr := json.Marshal(w)
	if mErr != nil {
		// Only strings are marshalled: this cannot fail. Keep the message.
		b, _ = json.Marshal(wireError{Message: err.Error()})
	}
	return b
}

// UnmarshalError decodes what MarshalError encoded: a *Rejection, so that
// errors.Is and errors.As hold on the sender's side, or a *RemoteError. An
// empty b decodes as nil.
func UnmarshalError(b []byte) error {
	if len(b) == 0 {
		return nil
	}
	var w wireError
	if err := json.Unmarshal(b, &w); err != nil {
		return fmt.Errorf("middleware: undecodable error in reply: %w", err)
	}
	if w.Rejection != nil && w.Rejection.Code != "" {
		return w.Rejection
	}
	return &RemoteError{Message: w.Message}
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
