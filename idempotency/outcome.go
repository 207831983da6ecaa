package idempotency

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/claimbus/claimbus/claimstore"
	"github.com/claimbus/claimbus/internal/wire"
	"github.com/claimbus/claimbus/middleware"
)

// Answer and OutcomeOf are the stored answer of an idempotent command,
// for a middleware that keeps outcomes its own way (the transactional
// one commits them with the handler's writes): which answers are final,
// how a result is encoded, and how a repeat is answered.

// Answer halts p, a repeat of a key, with the key's stored outcome o; fp
// is p's fingerprint: a rejection matching middleware.ErrIdempotencyConflict
// when the payloads differ. A stored result becomes the response as a
// json.RawMessage, so that the bus sends it as the first run's was sent.
func Answer(p *middleware.Pipeline, o claimstore.Outcome, fp []byte) {
	if !bytes.Equal(o.Fingerprint, fp) {
		p.Halt(middleware.Reject(middleware.CodeIdempotencyConflict, "",
			"the idempotency key was used by a command with another payload"))
		return
	}
	if len(o.Err) > 0 {
		err := wire.UnmarshalError(o.Err)
		var rej *middleware.Rejection
		if errors.As(err, &rej) {
			p.Halt(rej)
			return
		}
		p.Halt(fmt.Errorf("%w: %w", middleware.Reject(middleware.CodeUnavailable, "",
			"the stored answer of this command cannot be read"), err))
		return
	}
	if len(o.Result) > 0 {
		p.Respond(json.RawMessage(o.Result))
	} else {
		p.Respond(nil)
	}
	p.Halt(nil)
}

// OutcomeOf returns the outcome to store for p, whose payload's fingerprint is
// fp, and whether it is final (the answer every repeat must get): a
// success, or a final rejection (see final). err is set when the result
// cannot be encoded; then nothing is final.
func OutcomeOf(p *middleware.Pipeline, fp []byte) (claimstore.Outcome, bool, error) {
	if err := p.Err(); err != nil {
		rej, ok := final(err)
		if !ok {
			return claimstore.Outcome{}, false, nil
		}
		return claimstore.Outcome{Fingerprint: fp, Err: wire.MarshalError(rej)}, true, nil
	}
	res, _ := p.Response()
	b, err := encode(res)
	if err != nil {
		return claimstore.Outcome{}, false, err
	}
	return claimstore.Outcome{Fingerprint: fp, Result: b}, true, nil
}

// final returns the rejection in err's chain when it is a final answer:
// any code but unavailable, timeout, locked, not_applied and
// outcome_unknown, which say "try again", and not from a panic.
func final(err error) (*middleware.Rejection, bool) {
	var perr *middleware.PanicError
	var rej *middleware.Rejection
	if errors.As(err, &perr) || !errors.As(err, &rej) {
		return nil, false
	}
	switch rej.Code {
	case middleware.CodeUnavailable, middleware.CodeTimeout, middleware.CodeLocked,
		middleware.CodeNotApplied, middleware.CodeOutcomeUnknown:
		return nil, false
	}
	return rej, true
}

// encode encodes a result as the bus does. Its MarshalJSON is user code:
// a panic there is an error.
func encode(res any) (b []byte, err error) {
	if perr := middleware.Recover("idempotency result encoder", func() { b, err = json.Marshal(res) }); perr != nil {
		return nil, perr
	}
	return b, err
}
