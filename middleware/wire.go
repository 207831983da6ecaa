package middleware

import (
	"encoding/json"
	"errors"
	"fmt"
)

// wireError is how a command's error crosses the wire: a rejection as data,
// any other error as its message.
type wireError struct {
	Rejection *Rejection `json:"rejection,omitempty"`
	Message   string     `json:"message,omitempty"`
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

// MarshalError encodes err for a reply. A *Rejection anywhere in err's
// chain is kept as data; any other error keeps its message. A nil err
// encodes as nil.
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
