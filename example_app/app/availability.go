package app

import (
	"net/http"
	"sync/atomic"

	"github.com/claimbus/claimbus/middleware"
)

// Reasons a node is unavailable, as /healthz reports them.
const (
	// ReasonNodeNameLost: the node lost the lock on its own name (its
	// session with the database ended) and is retaking it.
	ReasonNodeNameLost = "node_name_lost"
)

// SetUnavailable stops the node from taking commands: until SetAvailable,
// every route that writes (each POST) answers 503 unavailable with
// Retry-After, and /healthz answers 503 with status "unavailable" and
// reason, a short code such as ReasonNodeNameLost (never internal detail).
// The reads (GET) still answer from the database, and GET /locks lists
// the locks, so an operator can see what the node holds meanwhile.
func (n *Node) SetUnavailable(reason string) {
	n.unavailable.Store(&reason)
}

// SetAvailable lets the node take commands again after SetUnavailable.
func (n *Node) SetAvailable() { n.unavailable.Store(nil) }

// Unavailable returns the reason given to SetUnavailable, or "" while the
// node is available.
func (n *Node) Unavailable() string {
	if r := n.unavailable.Load(); r != nil {
		return *r
	}
	return ""
}

// gated reports whether the node refuses r now, and answers it 503 if so.
func (n *Node) gated(w http.ResponseWriter, r *http.Request) bool {
	reason := n.Unavailable()
	if r.Method == http.MethodGet || r.Method == http.MethodHead || reason == "" {
		return false
	}
	n.log.WarnContext(r.Context(), "request failed: unavailable", "method", r.Method, "path", r.URL.Path, "reason", reason)
	w.Header().Set("Retry-After", "1")
	writeError(w, http.StatusServiceUnavailable, middleware.CodeUnavailable, "", "the node is not taking commands now, try again")
	return true
}

// availability is the gate's state, in Node.
type availability = atomic.Pointer[string]
