package bustest_test

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/components/cqrs"
	"github.com/ThreeDotsLabs/watermill/components/requestreply"
	"github.com/stretchr/testify/require"

	"github.com/claimbus/claimbus/bus/bustest"
	"github.com/claimbus/claimbus/commands"
	"github.com/claimbus/claimbus/internal/testlog"
	"github.com/claimbus/claimbus/middleware"
	"github.com/claimbus/claimbus/uniqueness"
)

// staffApp is an app's staff handler and read model, under NewCQRS.
type staffApp struct {
	mu     sync.Mutex
	emails map[string]bool
	fail   bool
}

func (a *staffApp) taken(_ context.Context, email string) (bool, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.emails[email], nil
}

func (a *staffApp) create(_ context.Context, c *commands.CreateStaff) (string, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.fail {
		return "", errors.New("database down")
	}
	a.emails[c.Email] = true
	return c.StaffID, nil
}

// An app's cqrs handler runs under the pipeline: a duplicate is answered
// already_taken naming the field, a failed handler leaves its email free
// (the reservation is cancelled), failures go to the harness's logger, and
// Reset empties the stores and calls the app's reset.
func TestCQRS(t *testing.T) {
	t.Parallel()
	app := &staffApp{emails: map[string]bool{}}
	var logs testlog.Buffer
	var mu sync.Mutex
	resets := 0
	c := bustest.NewCQRS(t, bustest.CQRSOptions[string]{
		Middleware: func(s bustest.Stores) ([]middleware.Middleware, error) {
			unique, err := uniqueness.New(uniqueness.Config{Locker: s.Locks, Rules: []uniqueness.Rule{
				uniqueness.Field(uniqueness.Names{Field: "email", Scope: "staff.email"},
					func(c *commands.CreateStaff) string { return c.Email }, app.taken, uniqueness.Reserve(s.Claims, time.Hour)),
			}})
			return []middleware.Middleware{unique}, err
		},
		Handlers: func(rr *middleware.RequestReply[string]) []cqrs.CommandHandler {
			return []cqrs.CommandHandler{requestreply.NewCommandHandlerWithResult("create_staff", rr, app.create)}
		},
		OnReset: func(context.Context) error {
			app.mu.Lock()
			defer app.mu.Unlock()
			clear(app.emails)
			mu.Lock()
			resets++
			mu.Unlock()
			return nil
		},
		Logger: slog.New(slog.NewTextHandler(&logs, nil)),
	})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	send := func(id string) requestreply.Reply[string] {
		reply, err := c.Send(ctx, &commands.CreateStaff{StaffID: id, Email: "ann@example.org", Name: "Ann"})
		require.NoError(t, err)
		return reply
	}

	app.mu.Lock()
	app.fail = true
	app.mu.Unlock()
	require.ErrorContains(t, send("s-0").Error, "database down")
	app.mu.Lock()
	app.fail = false
	app.mu.Unlock()
	ok := send("s-1")
	require.NoError(t, ok.Error, "the failed run's reservation was cancelled")
	require.Equal(t, "s-1", ok.HandlerResult)
	bustest.RequireRejection(t, send("s-2").Error, middleware.CodeAlreadyTaken, "email")
	require.Contains(t, logs.String(), "command failed")
	require.Contains(t, logs.String(), "command rejected")

	require.NoError(t, c.Reset(ctx))
	mu.Lock()
	require.Equal(t, 1, resets)
	mu.Unlock()
	require.NoError(t, send("s-3").Error, "after Reset the email is free again")
}

// A plain cqrs handler, which knows nothing of requestreply, under a
// RequestReply's OnHandle: its sender is answered all the same, with its
// error when it fails (it used to wait for its deadline).
func TestCQRSPlainHandlerIsAnswered(t *testing.T) {
	t.Parallel()
	c := bustest.NewCQRS(t, bustest.CQRSOptions[string]{
		Handlers: func(*middleware.RequestReply[string]) []cqrs.CommandHandler {
			return []cqrs.CommandHandler{cqrs.NewCommandHandler("create_staff", func(_ context.Context, c *commands.CreateStaff) error {
				if c.Name == "fail" {
					return errors.New("disk full")
				}
				return nil
			})}
		},
	})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	reply, err := c.Send(ctx, &commands.CreateStaff{StaffID: "s-1", Email: "ann@example.org", Name: "Ann"})
	require.NoError(t, err)
	require.NoError(t, reply.Error)
	reply, err = c.Send(ctx, &commands.CreateStaff{StaffID: "s-2", Email: "bob@example.org", Name: "fail"})
	require.NoError(t, err)
	require.ErrorContains(t, reply.Error, "disk full")
}
