package sqltransport

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/claimbus/claimbus/internal/pgerr"
	"github.com/claimbus/claimbus/middleware"
)

// errUnavailable is the rejection of a Publish that failed because the
// database could not be reached. Its message is for people: it names no
// server, since a rejection crosses the wire.
var errUnavailable = &middleware.Rejection{Code: middleware.CodeUnavailable, Message: "cannot reach the command queue now, try again"}

// unavailable returns err, the failure of a Publish under ctx, as an error
// that also matches middleware.ErrUnavailable when the database could not
// be reached (see pgerr.IsConnectionError): a *middleware.Rejection a sender can
// answer as "try again", with err wrapped beside it.
func unavailable(ctx context.Context, err error) error {
	if err == nil || !pgerr.IsConnectionError(ctx, err) {
		return err
	}
	return fmt.Errorf("sqltransport: %w: %w", errUnavailable, err)
}

// insertUnavailable is unavailable for the insert of a Publish: when the
// connection broke after the insert was sent (pgconn.SafeToRetry is
// false), the row may have committed and the command may run, so the
// error also matches middleware.ErrOutcomeUnknown.
func insertUnavailable(ctx context.Context, err error) error {
	uerr := unavailable(ctx, err)
	if uerr == err || pgconn.SafeToRetry(err) { //nolint:errorlint // identity, not matching: did unavailable return err itself?
		return uerr
	}
	return fmt.Errorf("%w: %w", uerr, middleware.ErrOutcomeUnknown)
}
