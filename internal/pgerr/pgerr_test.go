package pgerr

import (
	"context"
	"errors"
	"fmt"
	"io"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"
)

func TestIsConnectionError(t *testing.T) {
	t.Parallel()
	live := context.Background()
	done, cancel := context.WithCancel(context.Background())
	cancel()
	for _, tt := range []struct {
		name string
		ctx  context.Context
		err  error
		want bool
	}{
		{"admin shutdown", live, &pgconn.PgError{Code: "57P01"}, true},
		{"crash shutdown", live, &pgconn.PgError{Code: "57P02"}, true},
		{"cannot connect now", live, &pgconn.PgError{Code: "57P03"}, true},
		{"too many connections", live, &pgconn.PgError{Code: "53300"}, true},
		{"connection exception class", live, fmt.Errorf("wrapped: %w", &pgconn.PgError{Code: "08006"}), true},
		{"unique violation", live, &pgconn.PgError{Code: "23505"}, false},
		{"data exception", live, &pgconn.PgError{Code: "22021"}, false},
		{"closed connection", live, pgconn.ErrConnClosed, true},
		{"EOF", live, fmt.Errorf("read: %w", io.EOF), true},
		{"a timeout not ctx's", live, context.DeadlineExceeded, true},
		{"ctx's own end", done, context.Canceled, false},
		{"another error", live, errors.New("boom"), false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tt.want, IsConnectionError(tt.ctx, tt.err))
		})
	}
}
