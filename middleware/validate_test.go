package middleware_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/claimbus/claimbus/middleware"
)

// selfChecked is a command whose Validate returns err.
type selfChecked struct{ err error }

func (c *selfChecked) Validate() error { return c.err }

func TestValidate(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		cmd   any
		check func(t *testing.T, ran bool, err error)
	}{
		{
			name: "a valid command runs",
			cmd:  &CreateStaff{Email: "ann@x.org"},
			check: func(t *testing.T, ran bool, err error) {
				require.True(t, ran)
				require.NoError(t, err)
			},
		},
		{
			name: "a command without Validate runs",
			cmd:  &Transfer{ID: "t1"},
			check: func(t *testing.T, ran bool, err error) {
				require.True(t, ran)
				require.NoError(t, err)
			},
		},
		{
			name: "an error with Field names the field",
			cmd:  &CreateStaff{Email: "nobody"},
			check: func(t *testing.T, ran bool, err error) {
				require.False(t, ran)
				require.ErrorIs(t, err, middleware.ErrInvalid)
				var rej *middleware.Rejection
				require.ErrorAs(t, err, &rej)
				require.Equal(t, &middleware.Rejection{Code: middleware.CodeInvalid, Field: "email", Message: "email must contain @"}, rej)
				var fe *fieldErr
				require.ErrorAs(t, err, &fe, "the command's own error stays in the chain locally")
			},
		},
		{
			name: "a wrapped field error is found",
			cmd:  &selfChecked{err: fmt.Errorf("staff: %w", errors.Join(errors.New("name is empty"), &fieldErr{field: "age", msg: "too young"}))},
			check: func(t *testing.T, _ bool, err error) {
				var rej *middleware.Rejection
				require.ErrorAs(t, err, &rej)
				require.Equal(t, "age", rej.Field)
				require.Contains(t, rej.Message, "name is empty")
				require.Contains(t, rej.Message, "too young")
			},
		},
		{
			name: "an error without a field",
			cmd:  &selfChecked{err: errors.New("amount must be positive")},
			check: func(t *testing.T, _ bool, err error) {
				var rej *middleware.Rejection
				require.ErrorAs(t, err, &rej)
				require.Empty(t, rej.Field)
				require.Equal(t, "invalid: amount must be positive", err.Error())
			},
		},
		{
			name: "a rejection is kept as is",
			cmd:  &selfChecked{err: middleware.Reject(middleware.CodeAlreadyTaken, "name", "taken")},
			check: func(t *testing.T, _ bool, err error) {
				require.ErrorIs(t, err, middleware.ErrAlreadyTaken)
				require.NotErrorIs(t, err, middleware.ErrInvalid)
			},
		},
	}
	r := newRunner(t, middleware.Validate())
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ran, err := run(context.Background(), r, tt.cmd, nil)
			tt.check(t, ran, err)
		})
	}
}
