package middleware_test

import (
	"errors"
	"fmt"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/claimbus/claimbus/middleware"
)

func TestHTTPStatus(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		err  error
		want int
	}{
		{nil, http.StatusOK},
		{middleware.Reject(middleware.CodeAlreadyTaken, "email", "taken"), http.StatusConflict},
		{fmt.Errorf("wrapped: %w", middleware.ErrIdempotencyConflict), http.StatusConflict},
		{middleware.ErrInvalid, http.StatusUnprocessableEntity},
		{middleware.ErrLocked, http.StatusLocked},
		{middleware.ErrTimeout, http.StatusGatewayTimeout},
		{middleware.ErrUnavailable, http.StatusServiceUnavailable},
		{middleware.Reject("not_open", "", "closed"), http.StatusInternalServerError},
		{errors.New("disk full"), http.StatusInternalServerError},
	} {
		require.Equal(t, tt.want, middleware.HTTPStatus(tt.err), "%v", tt.err)
	}
}
