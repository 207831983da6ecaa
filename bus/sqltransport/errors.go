package sqltransport

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/claimbus/claimbus/middleware"
)

// Errors of the transport, matched with errors.Is.
var (
	// ErrClosed is returned by Publish and Subscribe after Close.
	ErrClosed = errors.New("sqltransport: closed")
	// ErrInvalidTopic is returned for a topic or node id with characters
	// other than letters, digits and - : . _ (topics name tables).
	ErrInvalidTopic = errors.New("sqltransport: invalid topic")
)

// errUnavailable is the rejection of a Publish that failed because the
// database could not be reached. Its message is for people: it names no
// server, since a rejection crosses the wire.
var errUnavailable = &middleware.Rejection{Code: middleware.CodeUnavailable, Message: "cannot reach the command queue now, try again"}

// unavailable returns err, the failure of a Publish under ctx, as an error
// that also matches middleware.ErrUnavailable when the database could not
// be reached (see isConnectionError): a *middleware.Rejection a sender can
// answer as "try again", with err wrapped beside it.
func unavailable(ctx context.Context, err error) error {
	if err == nil || !isConnectionError(ctx, err) {
		return err
	}
	return fmt.Errorf("sqltransport: %w: %w", errUnavailable, err)
}

// isConnectionError reports whether err, from a statement run under ctx,
// means that the database could not be reached or dropped the session: a
// failed connect, a connection closed or reset, SQLSTATE class 08
// (connection exception), 57P01 to 57P03 (admin shutdown, crash shutdown,
// cannot connect now), 53300 (too many connections), or a timeout that is
// not ctx's own.
func isConnectionError(ctx context.Context, err error) bool {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch {
		case len(pgErr.Code) == 5 && pgErr.Code[:2] == "08",
			pgErr.Code == "57P01", pgErr.Code == "57P02", pgErr.Code == "57P03", pgErr.Code == "53300":
			return true
		}
	}
	var connectErr *pgconn.ConnectError
	var netErr *net.OpError
	switch {
	case errors.As(err, &connectErr), errors.As(err, &netErr),
		errors.Is(err, pgconn.ErrConnClosed), errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return true
	case ctx.Err() == nil && (pgconn.Timeout(err) || errors.Is(err, context.DeadlineExceeded)):
		return true
	}
	return false
}
