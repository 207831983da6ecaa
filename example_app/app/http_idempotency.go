package app

import (
	"net/http"

	"github.com/claimbus/claimbus/commands"
)

// IdempotencyKeyHeader is the header that makes a POST /staff idempotent:
// every request with the same key gets the answer of the first (the same
// status and body), and one with the same key and another body gets 409
// idempotency_conflict.
const IdempotencyKeyHeader = "Idempotency-Key"

// staffBody is the body of POST /staff: the fields of a CreateStaff that a
// client sends in it (its idempotency key comes in the header).
type staffBody struct {
	StaffID string `json:"staff_id"`
	Email   string `json:"email"`
	Name    string `json:"name"`
}

// idempotencyHeader returns the request's Idempotency-Key, "" when it has
// none. A key that is sent twice, or is not 1 to 128 bytes of printable
// ASCII, is answered 400 bad_request naming the header, and
// idempotencyHeader returns false.
func idempotencyHeader(w http.ResponseWriter, r *http.Request) (string, bool) {
	keys := r.Header.Values(IdempotencyKeyHeader)
	switch {
	case len(keys) == 0:
		return "", true
	case len(keys) > 1:
		writeError(w, http.StatusBadRequest, CodeBadRequest, IdempotencyKeyHeader, "give one "+IdempotencyKeyHeader+" header")
		return "", false
	case keys[0] == "":
		writeError(w, http.StatusBadRequest, CodeBadRequest, IdempotencyKeyHeader, "the "+IdempotencyKeyHeader+" header is empty: drop it, or give a key such as a UUID")
		return "", false
	}
	if err := commands.CheckIdempotencyKey(IdempotencyKeyHeader, keys[0]); err != nil {
		writeError(w, http.StatusBadRequest, CodeBadRequest, IdempotencyKeyHeader, "the "+IdempotencyKeyHeader+" header "+reason(err))
		return "", false
	}
	return keys[0], true
}
