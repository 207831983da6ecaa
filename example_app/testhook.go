package main

import (
	"context"
	"log/slog"

	"github.com/claimbus/claimbus/commands"
	"github.com/claimbus/claimbus/middleware"
	"github.com/claimbus/claimbus/uniqueness"
)

// This file is not the service path: it holds the hook of the fault tests
// in package test, armed only by serve's -test-hold-email flag.

// holdEmail is the fault tests' hook (-test-hold-email): a CreateStaff of
// email waits inside its claim until the node stops, so that a test can
// kill the node while it holds the claim. It runs after the Uniqueness
// middleware. When the node stops, the command is halted as unavailable.
func holdEmail(email string, stopping <-chan struct{}, logger *slog.Logger) middleware.Middleware {
	return middleware.Hooks{OnBeforeDispatch: func(ctx context.Context, p *middleware.Pipeline) {
		c, ok := p.Command.(*commands.CreateStaff)
		if !ok || uniqueness.NormalizeEmail(c.Email) != email {
			return
		}
		logger.Warn("test hook: holding the claim of a CreateStaff until the node stops", "staff_id", c.StaffID)
		select {
		case <-stopping:
		case <-ctx.Done():
		}
		p.Halt(middleware.Reject(middleware.CodeUnavailable, "", "the node is stopping"))
	}}
}
