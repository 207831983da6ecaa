package middleware

import (
	"context"
	"errors"
	"log/slog"
)

// FailureLog says how a Runner logs the commands that do not succeed. The
// zero value logs them to slog.Default(), so that no rejection or handler
// error is lost silently, whichever adapter or bus runs the command.
type FailureLog struct {
	// Logger receives one record per command that does not succeed, when
	// its run ends (after the last after hook, before the sender is
	// answered), at a level saying what an operator must do about it:
	//   - "command halted as done" at Debug: halted with a nil error (a
	//     redelivery whose work committed, a repeat answered from a store);
	//   - "command rejected" at Info: a business answer (already_taken,
	//     invalid, locked, a claim's timeout...), with its "code" and, when
	//     set, "field";
	//   - "command unavailable" at Warn: a rejection with the unavailable
	//     code, from a failed lookup or store;
	//   - "command failed" at Error: a handler error, a context done before
	//     the handler;
	//   - "command panicked" at Error, with the "stack": a panic in a hook,
	//     a handler or a lookup;
	// each with "command", "command_id", "correlation_id" and "error".
	// Default slog.Default().
	Logger *slog.Logger
	// Off turns the log off: for a pipeline whose Logging middleware,
	// OnResult or senders report the outcomes already. Default false.
	Off bool
}

// logger returns the logger of f, nil when it is off.
func (f FailureLog) logger() *slog.Logger {
	switch {
	case f.Off:
		return nil
	case f.Logger != nil:
		return f.Logger
	}
	return slog.Default()
}

// logFailure logs the outcome of p, a command that did not succeed.
func logFailure(ctx context.Context, l *slog.Logger, p *Pipeline) {
	err := p.err
	var rej *Rejection
	var perr *PanicError
	level, msg := slog.LevelError, "command failed"
	switch {
	case errors.As(err, &perr):
		msg = "command panicked"
		errors.As(err, &rej)
	case p.halted && err == nil:
		level, msg = slog.LevelDebug, "command halted as done"
	case errors.As(err, &rej) && (rej.Code == CodeUnavailable || rej.Code == CodeNotApplied || rej.Code == CodeOutcomeUnknown):
		level, msg = slog.LevelWarn, "command unavailable"
	case rej != nil, p.halted:
		level, msg = slog.LevelInfo, "command rejected"
	}
	if !l.Enabled(ctx, level) {
		return
	}
	attrs := make([]slog.Attr, 0, 7)
	attrs = append(attrs,
		slog.String("command", p.CommandName),
		slog.String("command_id", p.CommandUUID),
		slog.String("correlation_id", p.CorrelationID))
	if rej != nil {
		attrs = append(attrs, slog.String("code", rej.Code))
		if rej.Field != "" {
			attrs = append(attrs, slog.String("field", rej.Field))
		}
	}
	if err != nil {
		attrs = append(attrs, slog.String("error", err.Error()))
	}
	if perr != nil {
		attrs = append(attrs, slog.String("stack", string(perr.Stack)))
	}
	l.LogAttrs(ctx, level, msg, attrs...)
}
