package middleware_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/claimbus/claimbus/middleware"
)

// syncBuffer is a bytes.Buffer safe for concurrent writers.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) records(t *testing.T) []map[string]any {
	t.Helper()
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []map[string]any
	dec := json.NewDecoder(bytes.NewReader(b.buf.Bytes()))
	for dec.More() {
		var rec map[string]any
		require.NoError(t, dec.Decode(&rec))
		out = append(out, rec)
	}
	return out
}

func TestLogging(t *testing.T) {
	t.Parallel()
	buf := &syncBuffer{}
	logger := slog.New(slog.NewJSONHandler(buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	r := newRunner(t,
		middleware.Logging(middleware.LoggingConfig{Logger: logger, Level: slog.LevelDebug}),
		middleware.Validate(), takenEmails)

	cases := []struct {
		email   string
		handler middleware.HandlerFunc
	}{
		{email: "ann@x.org"},
		{email: "taken@x.org"},
		{email: "ann@x.org", handler: func(context.Context, *middleware.Pipeline) (any, error) { return nil, errHandler }},
		{email: "ann@x.org", handler: func(context.Context, *middleware.Pipeline) (any, error) {
			return nil, middleware.Reject(middleware.CodeInvalid, "email", "domain refused")
		}},
	}
	for i, c := range cases {
		p := middleware.NewPipeline(context.Background(), &CreateStaff{Email: c.email})
		p.CommandName, p.CommandUUID, p.CorrelationID = createStaffName, fmt.Sprintf("cmd-%d", i+1), "corr-1"
		if i == 0 {
			p.CausationID = "cause-1"
		}
		h := c.handler
		if h == nil {
			h = func(context.Context, *middleware.Pipeline) (any, error) { return nil, nil }
		}
		_, _ = r.Run(context.Background(), p, h)
	}

	recs := buf.records(t)
	require.Len(t, recs, 4)
	for _, rec := range recs {
		require.Equal(t, createStaffName, rec["command"])
		require.Equal(t, "corr-1", rec["correlation_id"])
		require.Contains(t, rec, "duration")
		require.GreaterOrEqual(t, rec["duration"].(float64), 0.0)
	}
	pick := func(rec map[string]any, keys ...string) map[string]any {
		out := map[string]any{}
		for _, k := range keys {
			if v, ok := rec[k]; ok {
				out[k] = v
			}
		}
		return out
	}
	keys := []string{"level", "msg", "command_id", "causation_id", "outcome", "code", "field", "error"}
	require.Equal(t, map[string]any{
		"level": "DEBUG", "msg": "command handled", "command_id": "cmd-1", "causation_id": "cause-1", "outcome": "ok",
	}, pick(recs[0], keys...))
	require.Equal(t, map[string]any{
		"level": "DEBUG", "msg": "command halted", "command_id": "cmd-2", "outcome": "halted",
		"code": "already_taken", "field": "email", "error": "already_taken: email: taken@x.org is already taken",
	}, pick(recs[1], keys...))
	require.Equal(t, map[string]any{
		"level": "ERROR", "msg": "command failed", "command_id": "cmd-3", "outcome": "error", "error": "handler failed",
	}, pick(recs[2], keys...))
	require.Equal(t, map[string]any{
		"level": "DEBUG", "msg": "command failed", "command_id": "cmd-4", "outcome": "error",
		"code": "invalid", "field": "email", "error": "invalid: email: domain refused",
	}, pick(recs[3], keys...))
}

func TestLoggingRespectsLevel(t *testing.T) {
	t.Parallel()
	buf := &syncBuffer{}
	logger := slog.New(slog.NewJSONHandler(buf, &slog.HandlerOptions{Level: slog.LevelWarn}))
	r := newRunner(t, middleware.Logging(middleware.LoggingConfig{Logger: logger}))
	_, err := run(context.Background(), r, &CreateStaff{Email: "ann@x.org"}, nil)
	require.NoError(t, err)
	require.Empty(t, buf.records(t), "an ok command logs at Info, below the handler's level")
	_, err = run(context.Background(), r, &CreateStaff{Email: "ann@x.org"}, func(context.Context, *middleware.Pipeline) (any, error) {
		return nil, errHandler
	})
	require.ErrorIs(t, err, errHandler)
	require.Len(t, buf.records(t), 1)
}
