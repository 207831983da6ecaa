package app

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"time"

	"github.com/claimbus/claimbus/bus"
	"github.com/claimbus/claimbus/commands"
	"github.com/claimbus/claimbus/middleware"
)

// healthTimeout bounds the database ping of /healthz.
const healthTimeout = 2 * time.Second

// Handler returns the node's HTTP API (JSON in, JSON out):
//
//	POST /staff                     {staff_id, email, name}            201 Staff (200 for a replay, or a redelivery whose first run committed; Idempotency-Key header: every repeat gets the first answer)
//	GET  /staff/{id}                                                    200 Staff (from the read model: it lags in the events model)
//	GET  /staff?email=X                                                 200 [Staff] (at most one)
//	POST /wallets                   {wallet_id, currency, balance}      201 Wallet (set-up)
//	GET  /wallets/{id}                                                  200 Wallet
//	POST /transfers                 {transfer_id, from_wallet_id, ...}  201 Transfer
//	GET  /transfers/{id}                                                200 Transfer
//	POST /transfers/{id}/approve                                        200 Transfer
//	POST /transfers/{id}/cancel     {reason} (optional)                 200 Transfer
//	POST /lobbies                   {lobby_id, words}                   201 Lobby (set-up)
//	POST /lobbies/{id}/guesses      {word}                              200 Guess
//	GET  /healthz                                                       200 {status, node, backend, backstop_violations}
//	GET  /locks                                                         200 [HeldLock] (every node's)
//	GET  /locks?namespace=N&id=V                                        200 [HeldLock] (the holder of one key, at most one)
//
// While the node is unavailable (Node.SetUnavailable, as when it lost the
// lock on its name), every POST answers 503 unavailable with Retry-After
// and /healthz answers 503 {status: "unavailable", reason, ...}; the GETs
// still answer.
//
// Every answer is JSON. A failure is {"code": ..., "field": ..., "message":
// ...}, the field when one is at fault: already_taken, not_open,
// conflicting_replay and idempotency_conflict 409, invalid and
// insufficient_funds 422, locked 423, not_found 404, unavailable 503 (with Retry-After), timeout 504; a
// request the API does not understand is 400 bad_request (a body that is
// not exactly one JSON object of the route's fields, in UTF-8; a path id
// that is not an id; a bad query), 413 too_large, 404 not_found (no such
// route, or a path that is not in canonical form: no redirects) or 405
// method_not_allowed (with Allow). Bad input and outages are never a 5xx
// other than 503, and no answer carries an internal error: those are
// logged.
func (n *Node) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", n.healthz)
	mux.HandleFunc("GET /locks", n.locks)
	mux.HandleFunc("POST /staff", func(w http.ResponseWriter, r *http.Request) {
		var body staffBody
		if !decodeBody(w, r, &body, false) {
			return
		}
		key, ok := idempotencyHeader(w, r)
		if !ok {
			return
		}
		c := commands.CreateStaff{StaffID: body.StaffID, Email: body.Email, Name: body.Name, IdempotencyKey: key}
		n.answerWithin(w, r, n.signUpTimeout, func(ctx context.Context) (int, any, error) {
			s, created, err := n.signUp(ctx, &c)
			if created {
				return http.StatusCreated, s, err
			}
			return http.StatusOK, s, err
		})
	})
	mux.HandleFunc("GET /staff/{id}", func(w http.ResponseWriter, r *http.Request) {
		if id, ok := pathID(w, r, "staff_id"); ok {
			n.answer(w, r, http.StatusOK, func(ctx context.Context) (any, error) { return n.Staff(ctx, id) })
		}
	})
	mux.HandleFunc("GET /staff", func(w http.ResponseWriter, r *http.Request) {
		if email, ok := emailQuery(w, r); ok {
			n.answer(w, r, http.StatusOK, func(ctx context.Context) (any, error) { return n.StaffByEmail(ctx, email) })
		}
	})
	mux.HandleFunc("POST /wallets", func(w http.ResponseWriter, r *http.Request) {
		var wl Wallet
		if decodeBody(w, r, &wl, false) {
			n.answer(w, r, http.StatusCreated, func(ctx context.Context) (any, error) { return wl, n.AddWallet(ctx, wl) })
		}
	})
	mux.HandleFunc("GET /wallets/{id}", func(w http.ResponseWriter, r *http.Request) {
		if id, ok := pathID(w, r, "wallet_id"); ok {
			n.answer(w, r, http.StatusOK, func(ctx context.Context) (any, error) { return n.Wallet(ctx, id) })
		}
	})
	mux.HandleFunc("POST /transfers", func(w http.ResponseWriter, r *http.Request) {
		var c commands.OpenTransfer
		if decodeBody(w, r, &c, false) {
			n.answer(w, r, http.StatusCreated, func(ctx context.Context) (any, error) { return n.OpenTransfer(ctx, &c) })
		}
	})
	mux.HandleFunc("GET /transfers/{id}", func(w http.ResponseWriter, r *http.Request) {
		if id, ok := pathID(w, r, "transfer_id"); ok {
			n.answer(w, r, http.StatusOK, func(ctx context.Context) (any, error) { return n.Transfer(ctx, id) })
		}
	})
	mux.HandleFunc("POST /transfers/{id}/approve", func(w http.ResponseWriter, r *http.Request) {
		if id, ok := pathID(w, r, "transfer_id"); ok {
			c := commands.ApproveTransfer{TransferID: id}
			n.answer(w, r, http.StatusOK, func(ctx context.Context) (any, error) { return n.ApproveTransfer(ctx, &c) })
		}
	})
	mux.HandleFunc("POST /transfers/{id}/cancel", func(w http.ResponseWriter, r *http.Request) {
		id, ok := pathID(w, r, "transfer_id")
		var body struct {
			Reason string `json:"reason"`
		}
		if ok && decodeBody(w, r, &body, true) {
			c := commands.CancelTransfer{TransferID: id, Reason: body.Reason}
			n.answer(w, r, http.StatusOK, func(ctx context.Context) (any, error) { return n.CancelTransfer(ctx, &c) })
		}
	})
	mux.HandleFunc("POST /lobbies", func(w http.ResponseWriter, r *http.Request) {
		var body struct {
			LobbyID string   `json:"lobby_id"`
			Words   []string `json:"words"`
		}
		if decodeBody(w, r, &body, false) {
			n.answer(w, r, http.StatusCreated, func(ctx context.Context) (any, error) {
				if err := n.AddLobby(ctx, body.LobbyID, body.Words); err != nil {
					return nil, err
				}
				return n.Lobby(ctx, body.LobbyID)
			})
		}
	})
	mux.HandleFunc("POST /lobbies/{id}/guesses", func(w http.ResponseWriter, r *http.Request) {
		id, ok := pathID(w, r, "lobby_id")
		var body struct {
			Word string `json:"word"`
		}
		if ok && decodeBody(w, r, &body, false) {
			c := commands.GuessWord{LobbyID: id, Word: body.Word}
			n.answer(w, r, http.StatusOK, func(ctx context.Context) (any, error) { return n.GuessWord(ctx, &c) })
		}
	})
	return routes{mux: mux, node: n}
}

// health is the body of /healthz.
type health struct {
	// Status is "ok", or "unavailable" when the database does not answer
	// or the node is not taking commands (Node.SetUnavailable).
	Status string `json:"status"`
	// Reason is why the node is unavailable, when Node.SetUnavailable
	// said: such as "node_name_lost".
	Reason  string `json:"reason,omitempty"`
	Node    string `json:"node"`
	Backend string `json:"backend"`
	// BackstopViolations is Node.BackstopViolations: 0 while the claims
	// work.
	BackstopViolations int64 `json:"backstop_violations"`
}

func (n *Node) healthz(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), healthTimeout)
	defer cancel()
	h := health{Status: "ok", Node: n.name, Backend: n.backend.Name(), BackstopViolations: n.BackstopViolations()}
	status := http.StatusOK
	// The ping runs even when the node is unavailable for a reason of its
	// own, so that the log tells whether the database is down too.
	pingErr := n.backend.Ping(ctx)
	if pingErr != nil {
		n.log.WarnContext(ctx, "health check: the database does not answer", "error", pingErr)
	}
	if reason := n.Unavailable(); reason != "" {
		h.Status, h.Reason, status = "unavailable", reason, http.StatusServiceUnavailable
	} else if pingErr != nil {
		h.Status, status = "unavailable", http.StatusServiceUnavailable
	}
	if status == http.StatusServiceUnavailable {
		w.Header().Set("Retry-After", "1")
	}
	writeJSON(w, status, h)
}

// answer runs do within the request timeout and writes its result with
// status ok, or its error as answerError does.
func (n *Node) answer(w http.ResponseWriter, r *http.Request, ok int, do func(ctx context.Context) (any, error)) {
	n.answerFunc(w, r, func(ctx context.Context) (int, any, error) {
		res, err := do(ctx)
		return ok, res, err
	})
}

// answerFunc is answer for a do that picks its own status.
func (n *Node) answerFunc(w http.ResponseWriter, r *http.Request, do func(ctx context.Context) (int, any, error)) {
	n.answerWithin(w, r, n.requestTimeout, do)
}

// answerWithin is answerFunc within timeout rather than the request
// timeout.
func (n *Node) answerWithin(w http.ResponseWriter, r *http.Request, timeout time.Duration, do func(ctx context.Context) (int, any, error)) {
	ctx, cancel := context.WithTimeout(r.Context(), timeout)
	defer cancel()
	status, res, err := do(ctx)
	if err != nil {
		n.answerError(ctx, w, r, timeout, err)
		return
	}
	writeJSON(w, status, res)
}

// answerError writes err, the failure of a request under ctx bounded by
// timeout, with the status of its rejection. An error that is no
// rejection is 500 internal, logged: none of its words reach the client.
func (n *Node) answerError(ctx context.Context, w http.ResponseWriter, r *http.Request, timeout time.Duration, err error) {
	// A bus timeout is a rejection already (it matches
	// middleware.ErrTimeout); the other ends of a request become one here,
	// so that rejectionStatus alone picks the status.
	var rej *middleware.Rejection
	switch {
	case errors.As(err, &rej):
	case errors.Is(err, context.DeadlineExceeded), expired(ctx):
		// Also the failure of a command that the deadline cut short (a
		// lookup, a handler skipped) when its reply came as it passed.
		rej = middleware.Reject(middleware.CodeTimeout, "", "no answer within %v, try again", timeout)
	case errors.Is(err, bus.ErrClosed), errors.Is(err, context.Canceled):
		rej = middleware.Reject(middleware.CodeUnavailable, "", "the node is shutting down, try again")
	default:
		n.log.ErrorContext(ctx, "request failed", "method", r.Method, "path", r.URL.Path, "error", err)
		writeError(w, http.StatusInternalServerError, CodeInternal, "", "internal error")
		return
	}
	status := rejectionStatus(rej.Code)
	if status == http.StatusGatewayTimeout {
		// A claim's wait or the request's ran out: worth a look when it
		// happens often, so logged once per request, whichever node ran
		// the command.
		n.log.WarnContext(ctx, "request failed: timeout", "method", r.Method, "path", r.URL.Path, "error", err)
	}
	if status == http.StatusServiceUnavailable {
		// The node that hit the outage logs it: a rejection that came
		// back over the bus as data (a bare *Rejection) was logged where
		// it happened, with its cause.
		if _, bare := err.(*middleware.Rejection); !bare { //nolint:errorlint // the value itself: a bare *Rejection came over the bus, logged where it happened
			n.log.WarnContext(ctx, "request failed: unavailable", "method", r.Method, "path", r.URL.Path, "error", err)
		}
		w.Header().Set("Retry-After", "1")
	}
	writeJSON(w, status, rej)
}

// expired reports whether ctx's deadline has passed, by the clock: the
// bus's hooks end at the same deadline, and their failure can come back
// before ctx's own timer has fired.
func expired(ctx context.Context) bool {
	d, ok := ctx.Deadline()
	return ok && !time.Now().Before(d)
}

// rejectionStatus is the HTTP status of a rejection code: the app's own
// codes, then middleware.HTTPStatus for claimbus's.
func rejectionStatus(code string) int {
	switch code {
	case CodeNotOpen, CodeConflictingReplay:
		return http.StatusConflict
	case CodeInsufficientFunds:
		return http.StatusUnprocessableEntity
	case CodeNotFound:
		return http.StatusNotFound
	}
	return middleware.HTTPStatus(&middleware.Rejection{Code: code})
}

// writeError writes a failure that is not a command's rejection, in the
// same form.
func writeError(w http.ResponseWriter, status int, code, field, message string) {
	writeJSON(w, status, middleware.Rejection{Code: code, Field: field, Message: message})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}
