package app

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"path"

	"github.com/claimbus/claimbus/commands"
)

// routes serves the API's routes from mux, and answers in JSON what mux
// would answer in text or with a redirect: 404 for no route, 405 (with
// Allow) for a route without the method, and 404 for a path that is not in
// canonical form (// or a . or .. segment), which ServeMux would redirect
// to its cleaned form: a client of a JSON API gets an answer, not a
// redirect it may replay without its body.
type routes struct {
	mux  *http.ServeMux
	node *Node
}

func (rt routes) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if p := r.URL.EscapedPath(); p == "" || p[0] != '/' || (path.Clean(p) != p && path.Clean(p)+"/" != p) {
		writeError(w, http.StatusNotFound, CodeNotFound, "", "no such route: the path is not in canonical form")
		return
	}
	h, pattern := rt.mux.Handler(r)
	if pattern != "" {
		if rt.node.gated(w, r) {
			return
		}
		rt.mux.ServeHTTP(w, r) // matches again, and sets the path values
		return
	}
	// No route: ask mux which answer it has, 404 or 405 with its Allow.
	probe := &probeWriter{header: http.Header{}}
	h.ServeHTTP(probe, r)
	if probe.status == http.StatusMethodNotAllowed {
		allow := probe.header.Get("Allow")
		w.Header().Set("Allow", allow)
		writeError(w, http.StatusMethodNotAllowed, CodeMethodNotAllowed, "", fmt.Sprintf("the route takes %s, not %s", allow, r.Method))
		return
	}
	writeError(w, http.StatusNotFound, CodeNotFound, "", "no such route")
}

// Route returns the pattern of the route r takes, such as
// "POST /staff" or "GET /staff/{id}", or "" when it takes none: a label of
// few values, for metrics.
func (rt routes) Route(r *http.Request) string {
	_, pattern := rt.mux.Handler(r)
	return pattern
}

// probeWriter records the status and headers of a ServeMux answer that is
// not sent.
type probeWriter struct {
	header http.Header
	status int
}

func (p *probeWriter) Header() http.Header { return p.header }

func (p *probeWriter) WriteHeader(status int) {
	if p.status == 0 {
		p.status = status
	}
}

func (p *probeWriter) Write(b []byte) (int, error) {
	p.WriteHeader(http.StatusOK)
	return len(b), nil
}

// pathID returns the route's {id}, the field named field of the command
// or record it names, when it is an id by the commands' rule
// (commands.CheckID); otherwise it answers 400 bad_request naming field,
// since no resource can have such an id, and returns false.
func pathID(w http.ResponseWriter, r *http.Request, field string) (string, bool) {
	id := r.PathValue("id")
	if err := commands.CheckID(field, id); err != nil {
		writeError(w, http.StatusBadRequest, CodeBadRequest, field, "the "+field+" in the path "+reason(err))
		return "", false
	}
	return id, true
}

// emailQuery returns the address of GET /staff?email=X: exactly one email
// parameter, and nothing else, holding one bare address
// (commands.CheckEmail; escape a + as %2B, since a query reads + as a
// space). Otherwise it answers 400 bad_request and returns false.
func emailQuery(w http.ResponseWriter, r *http.Request) (string, bool) {
	q, err := url.ParseQuery(r.URL.RawQuery)
	var msg string
	switch {
	case err != nil:
		msg = "the query is not one: a % escape is broken"
	case len(q["email"]) == 0:
		msg = "give the address to look up: /staff?email=ann@example.org"
	case len(q["email"]) > 1:
		msg = "give one email parameter"
	case len(q) > 1:
		msg = "unknown query parameter: the only one is email"
	default:
		if err := commands.CheckEmail("email", q.Get("email")); err != nil {
			writeError(w, http.StatusBadRequest, CodeBadRequest, "email", "the email in the query "+reason(err))
			return "", false
		}
		return q.Get("email"), true
	}
	writeError(w, http.StatusBadRequest, CodeBadRequest, "", msg)
	return "", false
}

// reason returns the reason of a commands check's refusal, such as
// "contains a control character".
func reason(err error) string {
	var fe *commands.FieldError
	if errors.As(err, &fe) {
		return fe.Reason
	}
	return "is not valid"
}
