package app

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/claimbus/claimbus/bus"
	"github.com/claimbus/claimbus/commands"
	"github.com/claimbus/claimbus/middleware"
)

// maxBody bounds a request body.
const maxBody = 64 << 10

// Handler returns the node's HTTP API (JSON in, JSON out):
//
//	POST /staff                     {staff_id, email, name}            201 Staff
//	POST /wallets                   {wallet_id, currency, balance}      201 Wallet (set-up)
//	GET  /wallets/{id}                                                  200 Wallet
//	POST /transfers                 {transfer_id, from_wallet_id, ...}  201 Transfer
//	GET  /transfers/{id}                                                200 Transfer
//	POST /transfers/{id}/approve                                        200 Transfer
//	POST /transfers/{id}/cancel     {reason}                            200 Transfer
//	POST /lobbies                   {lobby_id, words}                   201 Lobby (set-up)
//	POST /lobbies/{id}/guesses      {word}                              200 Guess
//	GET  /healthz                                                       200 {status, node, backend}, 503
//
// A rejection is answered with its status and the rejection as JSON,
// {"code": ..., "field": ..., "message": ...}: already_taken and not_open
// 409, invalid and insufficient_funds 422, locked 423, not_found 404,
// unavailable 503 (with Retry-After: the database or the lock store cannot
// be reached, on every route, until it can again), timeout 504. A body
// that is not the JSON expected is 400 with code "bad_request". No answer
// carries a driver's error: those are logged.
func (n *Node) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", n.healthz)
	mux.HandleFunc("POST /staff", func(w http.ResponseWriter, r *http.Request) {
		var c commands.CreateStaff
		if decode(w, r, &c) {
			n.answer(w, r, http.StatusCreated, func(ctx context.Context) (any, error) { return n.CreateStaff(ctx, &c) })
		}
	})
	mux.HandleFunc("POST /wallets", func(w http.ResponseWriter, r *http.Request) {
		var wl Wallet
		if decode(w, r, &wl) {
			n.answer(w, r, http.StatusCreated, func(ctx context.Context) (any, error) { return wl, n.AddWallet(ctx, wl) })
		}
	})
	mux.HandleFunc("GET /wallets/{id}", func(w http.ResponseWriter, r *http.Request) {
		n.answer(w, r, http.StatusOK, func(ctx context.Context) (any, error) { return n.Wallet(ctx, r.PathValue("id")) })
	})
	mux.HandleFunc("POST /transfers", func(w http.ResponseWriter, r *http.Request) {
		var c commands.OpenTransfer
		if decode(w, r, &c) {
			n.answer(w, r, http.StatusCreated, func(ctx context.Context) (any, error) { return n.OpenTransfer(ctx, &c) })
		}
	})
	mux.HandleFunc("GET /transfers/{id}", func(w http.ResponseWriter, r *http.Request) {
		n.answer(w, r, http.StatusOK, func(ctx context.Context) (any, error) { return n.Transfer(ctx, r.PathValue("id")) })
	})
	mux.HandleFunc("POST /transfers/{id}/approve", func(w http.ResponseWriter, r *http.Request) {
		c := commands.ApproveTransfer{TransferID: r.PathValue("id")}
		n.answer(w, r, http.StatusOK, func(ctx context.Context) (any, error) { return n.ApproveTransfer(ctx, &c) })
	})
	mux.HandleFunc("POST /transfers/{id}/cancel", func(w http.ResponseWriter, r *http.Request) {
		var body struct {
			Reason string `json:"reason"`
		}
		if r.ContentLength != 0 && !decode(w, r, &body) {
			return
		}
		c := commands.CancelTransfer{TransferID: r.PathValue("id"), Reason: body.Reason}
		n.answer(w, r, http.StatusOK, func(ctx context.Context) (any, error) { return n.CancelTransfer(ctx, &c) })
	})
	mux.HandleFunc("POST /lobbies", func(w http.ResponseWriter, r *http.Request) {
		var body struct {
			LobbyID string   `json:"lobby_id"`
			Words   []string `json:"words"`
		}
		if decode(w, r, &body) {
			n.answer(w, r, http.StatusCreated, func(ctx context.Context) (any, error) {
				if err := n.AddLobby(ctx, body.LobbyID, body.Words); err != nil {
					return nil, err
				}
				return n.Lobby(ctx, body.LobbyID)
			})
		}
	})
	mux.HandleFunc("POST /lobbies/{id}/guesses", func(w http.ResponseWriter, r *http.Request) {
		var body struct {
			Word string `json:"word"`
		}
		if decode(w, r, &body) {
			c := commands.GuessWord{LobbyID: r.PathValue("id"), Word: body.Word}
			n.answer(w, r, http.StatusOK, func(ctx context.Context) (any, error) { return n.GuessWord(ctx, &c) })
		}
	})
	return mux
}

// healthTimeout bounds the database ping of /healthz.
const healthTimeout = 2 * time.Second

// health is the body of /healthz.
type health struct {
	// Status is "ok", or "unavailable" when the database does not answer.
	Status  string `json:"status"`
	Node    string `json:"node"`
	Backend string `json:"backend"`
}

func (n *Node) healthz(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), healthTimeout)
	defer cancel()
	h := health{Status: "ok", Node: n.name, Backend: n.backend.Name()}
	status := http.StatusOK
	if err := n.backend.Ping(ctx); err != nil {
		n.log.WarnContext(ctx, "health check: the database does not answer", "error", err)
		h.Status, status = "unavailable", http.StatusServiceUnavailable
		w.Header().Set("Retry-After", "1")
	}
	writeJSON(w, status, h)
}

// answer runs do within the request timeout and writes its result with
// status ok, or its error with the status of its rejection. An error that
// is no rejection is 500 internal, logged: none of its words reach the
// client.
func (n *Node) answer(w http.ResponseWriter, r *http.Request, ok int, do func(ctx context.Context) (any, error)) {
	ctx, cancel := context.WithTimeout(r.Context(), n.requestTimeout)
	defer cancel()
	res, err := do(ctx)
	if err == nil {
		writeJSON(w, ok, res)
		return
	}
	// A bus timeout is a rejection already (it matches
	// middleware.ErrTimeout); the other ends of a request become one here,
	// so that rejectionStatus alone picks the status.
	var rej *middleware.Rejection
	switch {
	case errors.As(err, &rej):
	case errors.Is(err, context.DeadlineExceeded):
		rej = middleware.Reject(middleware.CodeTimeout, "", "no answer within %v, try again", n.requestTimeout)
	case errors.Is(err, bus.ErrClosed), errors.Is(err, context.Canceled):
		rej = middleware.Reject(middleware.CodeUnavailable, "", "the node is shutting down, try again")
	default:
		n.log.ErrorContext(ctx, "request failed", "method", r.Method, "path", r.URL.Path, "error", err)
		writeJSON(w, http.StatusInternalServerError, map[string]string{"code": "internal", "message": "internal error"})
		return
	}
	status := rejectionStatus(rej.Code)
	if status == http.StatusServiceUnavailable {
		// The node that hit the outage logs it: a rejection that came
		// back over the bus as data (a bare *Rejection) was logged where
		// it happened, with its cause.
		if _, bare := err.(*middleware.Rejection); !bare {
			n.log.WarnContext(ctx, "request failed: unavailable", "method", r.Method, "path", r.URL.Path, "error", err)
		}
		w.Header().Set("Retry-After", "1")
	}
	writeJSON(w, status, rej)
}

// rejectionStatus is the HTTP status of a rejection code.
func rejectionStatus(code string) int {
	switch code {
	case middleware.CodeAlreadyTaken, CodeNotOpen:
		return http.StatusConflict
	case middleware.CodeInvalid, CodeInsufficientFunds:
		return http.StatusUnprocessableEntity
	case middleware.CodeLocked:
		return http.StatusLocked
	case CodeNotFound:
		return http.StatusNotFound
	case middleware.CodeTimeout:
		return http.StatusGatewayTimeout
	case middleware.CodeUnavailable:
		return http.StatusServiceUnavailable
	}
	return http.StatusInternalServerError
}

// decode reads the JSON body into v; on failure it answers 400 and
// returns false.
func decode(w http.ResponseWriter, r *http.Request, v any) bool {
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxBody))
	dec.DisallowUnknownFields()
	err := dec.Decode(v)
	if err == nil && dec.More() {
		err = errors.New("more than one JSON value")
	}
	if err != nil {
		writeJSON(w, http.StatusBadRequest, map[string]string{"code": "bad_request", "message": fmt.Sprintf("the body is not the JSON expected: %v", err)})
		return false
	}
	return true
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}
