package middleware

import (
	"context"
	"errors"
	"log/slog"
	"time"
)

// LoggingConfig configures the Logging middleware. The zero value logs to
// slog.Default().
type LoggingConfig struct {
	// Logger receives one record per command. Default slog.Default().
	Logger *slog.Logger
	// Level is the level of commands that succeeded or were rejected (halted,
	// or failed with a *Rejection). Default slog.LevelInfo.
	Level slog.Leveler
	// ErrorLevel is the level of commands that failed otherwise (an error or
	// a panic). Default slog.LevelError.
	ErrorLevel slog.Leveler
}

// Logging returns a middleware that logs one record per command when it
// ends, with the command name ("command"), "command_id",
// "correlation_id", "causation_id" (when set), "duration" (from its
// BeforeDispatch to its after hook) and "outcome": "ok", "halted" or
// "error", with the rejection's "code" and "field" and the "error" when
// there is one. Put it first, so that it times the whole run and its after
// hook, which runs last, sees the final outcome.
func Logging(cfg LoggingConfig) Middleware {
	l := &loggingMiddleware{logger: cfg.Logger, level: cfg.Level, errorLevel: cfg.ErrorLevel}
	if l.logger == nil {
		l.logger = slog.Default()
	}
	if l.level == nil {
		l.level = slog.LevelInfo
	}
	if l.errorLevel == nil {
		l.errorLevel = slog.LevelError
	}
	return l
}

type loggingMiddleware struct {
	logger     *slog.Logger
	level      slog.Leveler
	errorLevel slog.Leveler
}

const loggingStartKey = "\x00logging start"

// BeforeDispatch notes the start time.
func (l *loggingMiddleware) BeforeDispatch(_ context.Context, p *Pipeline) {
	p.Assign(loggingStartKey, time.Now())
}

// AfterDispatch logs the command's outcome.
func (l *loggingMiddleware) AfterDispatch(ctx context.Context, p *Pipeline) { l.log(ctx, p) }

// AfterFailure logs the command's outcome.
func (l *loggingMiddleware) AfterFailure(ctx context.Context, p *Pipeline) { l.log(ctx, p) }

func (l *loggingMiddleware) log(ctx context.Context, p *Pipeline) {
	err := p.Err()
	var rej *Rejection
	rejected := errors.As(err, &rej)
	level, msg, outcome := l.level.Level(), "command handled", "ok"
	switch {
	case p.Halted():
		msg, outcome = "command halted", "halted"
	case err != nil:
		msg, outcome = "command failed", "error"
		if !rejected {
			level = l.errorLevel.Level()
		}
	}
	if !l.logger.Enabled(ctx, level) {
		return
	}
	attrs := make([]slog.Attr, 0, 9)
	attrs = append(attrs,
		slog.String("command", p.CommandName),
		slog.String("command_id", p.CommandUUID),
		slog.String("correlation_id", p.CorrelationID))
	if p.CausationID != "" {
		attrs = append(attrs, slog.String("causation_id", p.CausationID))
	}
	if v, ok := p.Assigned(loggingStartKey); ok {
		attrs = append(attrs, slog.Duration("duration", time.Since(v.(time.Time))))
	}
	attrs = append(attrs, slog.String("outcome", outcome))
	if rejected {
		attrs = append(attrs, slog.String("code", rej.Code))
		if rej.Field != "" {
			attrs = append(attrs, slog.String("field", rej.Field))
		}
	}
	if err != nil {
		attrs = append(attrs, slog.String("error", err.Error()))
	}
	l.logger.LogAttrs(ctx, level, msg, attrs...)
}
