// Package pgerr tells which PostgreSQL errors mean an outage, for the
// packages that answer one as "unavailable, try again".
package pgerr

import (
	"context"
	"errors"
	"io"
	"net"

	"github.com/jackc/pgx/v5/pgconn"
)

// IsConnectionError reports whether err, from a statement run under ctx,
// means that the database could not be reached or dropped the session: a
// failed connect, a connection closed or reset, SQLSTATE class 08
// (connection exception), 57P01 to 57P03 (admin shutdown, crash shutdown,
// cannot connect now), 53300 (too many connections), or a timeout that is
// not ctx's own (a dial or a read that hung).
func IsConnectionError(ctx context.Context, err error) bool {
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
