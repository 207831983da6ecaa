// Package stormtest is a fake example_app node for the tests of storm: it
// serves POST /staff, GET /staff?email=X and GET /healthz as app/http.go
// documents them, on a Store that several nodes share as nodes share one
// database, and can be told to break the guarantees in a few ways.
package stormtest

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/claimbus/claimbus/uniqueness"
)

// Staff is a member of staff, as the API answers it.
type Staff struct {
	StaffID string `json:"staff_id"`
	Email   string `json:"email"`
	Name    string `json:"name"`
}

// Store is the staff table of the fake nodes, claims and all: one mutex
// stands for the claim on every normalised email.
type Store struct {
	mu      sync.Mutex
	byEmail map[string][]Staff
	ids     map[string]bool
	// doubled is the email DoubleCreate answered a second 201 for.
	doubled string
}

// NewStore returns an empty Store.
func NewStore() *Store {
	return &Store{byEmail: map[string][]Staff{}, ids: map[string]bool{}}
}

// Rows returns the staff with the normalised email.
func (s *Store) Rows(email string) []Staff {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Staff(nil), s.byEmail[email]...)
}

// Len returns the number of staff.
func (s *Store) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.ids)
}

// Node is a fake node. Set its fields before Start.
type Node struct {
	// Name is what /healthz says; Store is where its staff are.
	Name  string
	Store *Store

	// DoubleCreate: the first POST /staff of an email already taken is
	// answered 201 all the same (without a row), once.
	DoubleCreate bool
	// DoubleRow: GET /staff lists the first email it finds a member for
	// twice, the second time under another staff id.
	DoubleRow bool
	// Backstops is the backstop_violations /healthz reports.
	Backstops int64
	// Fail500 is how many POST /staff, the first ones, are answered 500.
	Fail500 int64
	// Gate, when not nil, holds each POST /staff until it is closed or
	// the request ends; Arrived, when not nil, is sent to as each one
	// arrives.
	Gate    <-chan struct{}
	Arrived chan<- struct{}

	posts, gets atomic.Int64
	mu          sync.Mutex
	doubledRow  string
}

// Start serves n on 127.0.0.1 until the test ends, and returns its base
// URL.
func Start(t testing.TB, n *Node) string {
	t.Helper()
	if n.Store == nil {
		n.Store = NewStore()
	}
	srv := httptest.NewServer(n.handler())
	t.Cleanup(srv.Close)
	return srv.URL
}

// Posts returns how many POST /staff n received.
func (n *Node) Posts() int64 { return n.posts.Load() }

// Gets returns how many GET /staff n received.
func (n *Node) Gets() int64 { return n.gets.Load() }

// DoubledCreate returns the email DoubleCreate answered a second 201 for
// on any node of the store, or "".
func (s *Store) DoubledCreate() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.doubled
}

// DoubledRow returns the email DoubleRow listed twice, or "".
func (n *Node) DoubledRow() string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.doubledRow
}

func (n *Node) handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, map[string]any{"status": "ok", "node": n.Name, "backend": "fake", "backstop_violations": n.Backstops})
	})
	mux.HandleFunc("POST /staff", n.post)
	mux.HandleFunc("GET /staff", n.list)
	return mux
}

func (n *Node) post(w http.ResponseWriter, r *http.Request) {
	k := n.posts.Add(1)
	if n.Arrived != nil {
		select {
		case n.Arrived <- struct{}{}:
		case <-r.Context().Done():
			return
		}
	}
	if n.Gate != nil {
		select {
		case <-n.Gate:
		case <-r.Context().Done():
			return
		}
	}
	if k <= n.Fail500 {
		writeJSON(w, http.StatusInternalServerError, rejection{Code: "internal", Message: "internal error"})
		return
	}
	var c Staff
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, 64<<10))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&c); err != nil {
		writeJSON(w, http.StatusBadRequest, rejection{Code: "bad_request", Message: err.Error()})
		return
	}
	if err := c.validate(); err != nil {
		writeJSON(w, http.StatusUnprocessableEntity, *err)
		return
	}
	s := Staff{StaffID: c.StaffID, Email: uniqueness.NormalizeEmail(c.Email), Name: strings.TrimSpace(c.Name)}

	st := n.Store
	st.mu.Lock()
	defer st.mu.Unlock()
	switch {
	case st.ids[s.StaffID]:
		writeJSON(w, http.StatusConflict, rejection{Code: "already_taken", Field: "staff_id", Message: "a member of staff has this id"})
	case len(st.byEmail[s.Email]) > 0 && n.DoubleCreate && st.doubled == "":
		st.doubled = s.Email
		writeJSON(w, http.StatusCreated, s)
	case len(st.byEmail[s.Email]) > 0:
		writeJSON(w, http.StatusConflict, rejection{Code: "already_taken", Field: "email", Message: "email is already taken"})
	default:
		st.ids[s.StaffID] = true
		st.byEmail[s.Email] = append(st.byEmail[s.Email], s)
		writeJSON(w, http.StatusCreated, s)
	}
}

func (n *Node) list(w http.ResponseWriter, r *http.Request) {
	n.gets.Add(1)
	email := r.URL.Query().Get("email")
	if strings.TrimSpace(email) == "" {
		writeJSON(w, http.StatusBadRequest, rejection{Code: "bad_request", Message: "give ?email="})
		return
	}
	rows := n.Store.Rows(uniqueness.NormalizeEmail(email))
	if n.DoubleRow && len(rows) == 1 {
		n.mu.Lock()
		if n.doubledRow == "" || n.doubledRow == rows[0].Email {
			n.doubledRow = rows[0].Email
			rows = append(rows, Staff{StaffID: rows[0].StaffID + "-twin", Email: rows[0].Email, Name: rows[0].Name})
		}
		n.mu.Unlock()
	}
	if rows == nil {
		rows = []Staff{}
	}
	writeJSON(w, http.StatusOK, rows)
}

// rejection is the body of an answer other than 2xx.
type rejection struct {
	Code    string `json:"code"`
	Field   string `json:"field,omitempty"`
	Message string `json:"message"`
}

func (c Staff) validate() *rejection {
	field := ""
	switch {
	case strings.TrimSpace(c.StaffID) == "" || strings.ContainsAny(c.StaffID, " \t\n"):
		field = "staff_id"
	case !strings.Contains(c.Email, "@"):
		field = "email"
	case strings.TrimSpace(c.Name) == "":
		field = "name"
	default:
		return nil
	}
	return &rejection{Code: "invalid", Field: field, Message: field + " is invalid"}
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// StartClosed returns the base URL of a server that was started and
// closed at once: a port on 127.0.0.1 that refuses connections.
func StartClosed(t testing.TB) string {
	t.Helper()
	srv := httptest.NewServer(http.NotFoundHandler())
	srv.Close()
	return srv.URL
}
