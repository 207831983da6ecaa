package sqltransport

import "errors"

// Errors of the transport, matched with errors.Is.
var (
	// ErrClosed is returned by Publish and Subscribe after Close.
	ErrClosed = errors.New("sqltransport: closed")
	// ErrInvalidTopic is returned for a topic or node id with characters
	// other than letters, digits and - : . _ (topics name tables).
	ErrInvalidTopic = errors.New("sqltransport: invalid topic")
)
