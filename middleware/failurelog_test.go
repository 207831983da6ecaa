package middleware_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/claimbus/claimbus/middleware"
)

// Every command that does not succeed is logged by default, at a level
// that says how it ended; a success is not, and Off turns the log off.
func TestRunnerLogsFailures(t *testing.T) {
	t.Parallel()
	handlerErr := errors.New("disk full")
	for name, tc := range map[string]struct {
		hook    func(p *middleware.Pipeline)
		handler middleware.HandlerFunc
		off     bool
		level   string
		msg     string
		code    string
		stack   bool
	}{
		"rejected": {
			hook: func(p *middleware.Pipeline) {
				p.Halt(middleware.Reject(middleware.CodeAlreadyTaken, "email", "email is taken"))
			},
			level: "INFO", msg: "command rejected", code: "already_taken",
		},
		"halted as done": {
			hook:  func(p *middleware.Pipeline) { p.Halt(nil) },
			level: "DEBUG", msg: "command halted as done",
		},
		"handler error": {
			handler: func(context.Context, *middleware.Pipeline) (any, error) { return nil, handlerErr },
			level:   "ERROR", msg: "command failed",
		},
		"handler rejection": {
			handler: func(context.Context, *middleware.Pipeline) (any, error) {
				return nil, middleware.Reject(middleware.CodeInvalid, "name", "bad name")
			},
			level: "INFO", msg: "command rejected", code: "invalid",
		},
		"panic": {
			handler: func(context.Context, *middleware.Pipeline) (any, error) { panic("boom") },
			level:   "ERROR", msg: "command panicked", stack: true,
		},
		"a panicking lookup, rejected as unavailable": {
			hook: func(p *middleware.Pipeline) {
				perr := middleware.Recover("lookup", func() { panic("lookup boom") })
				p.Halt(fmt.Errorf("%w: %w", middleware.Reject(middleware.CodeUnavailable, "email", "cannot check"), perr))
			},
			level: "ERROR", msg: "command panicked", code: "unavailable", stack: true,
		},
		"unavailable": {
			hook: func(p *middleware.Pipeline) {
				p.Halt(middleware.Reject(middleware.CodeUnavailable, "", "the lock store cannot be reached now"))
			},
			level: "WARN", msg: "command unavailable", code: "unavailable",
		},
		"claim timeout": {
			hook: func(p *middleware.Pipeline) {
				p.Halt(middleware.Reject(middleware.CodeTimeout, "email", "still claimed after 5s"))
			},
			level: "INFO", msg: "command rejected", code: "timeout",
		},
		"success": {},
		"off": {
			handler: func(context.Context, *middleware.Pipeline) (any, error) { return nil, handlerErr },
			off:     true,
		},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			var buf bytes.Buffer
			logger := slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
			hooks := middleware.Hooks{OnBeforeDispatch: func(_ context.Context, p *middleware.Pipeline) {
				if tc.hook != nil {
					tc.hook(p)
				}
			}}
			r, err := middleware.NewRunner(middleware.RunnerConfig{
				Middleware: []middleware.Middleware{hooks},
				FailureLog: middleware.FailureLog{Logger: logger, Off: tc.off},
			})
			require.NoError(t, err)
			h := tc.handler
			if h == nil {
				h = func(context.Context, *middleware.Pipeline) (any, error) { return "ok", nil }
			}
			p := middleware.NewPipeline(context.Background(), "cmd")
			p.CommandName, p.CommandUUID, p.CorrelationID = "commands.CreateStaff", "cmd-1", "corr-1"
			_, _ = r.Run(context.Background(), p, h)
			if tc.level == "" {
				require.Empty(t, buf.String())
				return
			}
			var rec map[string]any
			require.NoError(t, json.Unmarshal(buf.Bytes(), &rec), "one record: %s", buf.String())
			require.Equal(t, tc.level, rec["level"])
			require.Equal(t, tc.msg, rec["msg"])
			require.Equal(t, "commands.CreateStaff", rec["command"])
			require.Equal(t, "cmd-1", rec["command_id"])
			require.Equal(t, "corr-1", rec["correlation_id"])
			if tc.code != "" {
				require.Equal(t, tc.code, rec["code"])
			}
			if tc.stack {
				require.Contains(t, rec["stack"], "runtime/debug.Stack", "a panic is logged with its stack")
			} else {
				require.NotContains(t, rec, "stack")
			}
		})
	}
}
