package middleware

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"
)

// HandlerFunc handles the command a pipeline carries and returns its result.
// ctx is p.Context(), carrying the command's ids (see IDsFromContext).
type HandlerFunc func(ctx context.Context, p *Pipeline) (any, error)

// DefaultReleaseTimeout bounds the after hooks of a run when
// RunnerConfig.ReleaseTimeout is zero.
const DefaultReleaseTimeout = 10 * time.Second

// RunnerConfig configures a Runner.
type RunnerConfig struct {
	// Middleware runs around every command, in this order.
	Middleware []Middleware
	// ReleaseTimeout bounds the after hooks of one run, which get a context
	// that the sender going away does not cancel. Default
	// DefaultReleaseTimeout.
	ReleaseTimeout time.Duration
	// FailureLog logs every command that does not succeed (see FailureLog).
	// Default: to slog.Default().
	FailureLog FailureLog
}

// Validate reports every problem of the configuration.
func (c RunnerConfig) Validate() error {
	var errs []error
	for i, m := range c.Middleware {
		if m == nil {
			errs = append(errs, fmt.Errorf("middleware: Middleware[%d] is nil", i))
		}
	}
	errs = append(errs, checkStages(c.Middleware))
	if c.ReleaseTimeout < 0 {
		errs = append(errs, fmt.Errorf("middleware: ReleaseTimeout is negative (%v)", c.ReleaseTimeout))
	}
	return errors.Join(errs...)
}

// checkStages reports a middleware of mws placed after one of a later
// Stage.
func checkStages(mws []Middleware) error {
	last, at := Stage(0), -1
	var errs []error
	for i, m := range mws {
		s, ok := m.(staged)
		if !ok {
			continue
		}
		switch st := s.Stage(); {
		case st < last:
			errs = append(errs, fmt.Errorf("middleware: Middleware[%d] (%T) answers repeats from a store but comes after Middleware[%d] (%T), which claims: "+
				"a repeat would be refused by the claim of its first run; put it before", i, m, at, mws[at]))
		case st > last:
			last, at = st, i
		}
	}
	return errors.Join(errs...)
}

// Runner runs commands through a fixed list of middleware and a handler. It
// is safe for concurrent use.
type Runner struct {
	mws            []Middleware
	releaseTimeout time.Duration
	failLog        *slog.Logger // nil when off
}

// NewRunner returns a runner for cfg.
func NewRunner(cfg RunnerConfig) (*Runner, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Runner{
		mws:            append([]Middleware(nil), cfg.Middleware...),
		releaseTimeout: cmp.Or(cfg.ReleaseTimeout, DefaultReleaseTimeout),
		failLog:        cfg.FailureLog.logger(),
	}, nil
}

// Run carries p through the middleware and h, and returns the command's
// response and error:
//   - BeforeDispatch hooks run in order; a halt or a panic stops the rest and
//     the handler;
//   - when ctx or p.Context() is already done, the handler is skipped and
//     the command fails with that context's error;
//   - the handler's result becomes the response unless a hook responded;
//   - after a successful handler, AfterDispatch hooks run; after a failure,
//     a panic or a halt, AfterFailure hooks run (also for the hooks after
//     one that failed the command with Pipeline.Fail or a panic); either runs in reverse
//     order, once, only for middleware whose BeforeDispatch started, even
//     when a hook panics or a call ends the goroutine with runtime.Goexit
//     (then Run does not return), with a context that ctx's cancellation
//     does not reach and that ends after the release timeout;
//   - a panic in a hook or the handler is recovered as a *PanicError and
//     becomes the command's error, unless an earlier error is recorded.
//
// ctx is the command's context; p's handler context starts as ctx when p
// has none. The handler gets p.Context() carrying p (see
// PipelineFromContext) and the ids of the commands it sends (see
// IDsFromContext).
func (r *Runner) Run(ctx context.Context, p *Pipeline, h HandlerFunc) (any, error) {
	return r.run(ctx, p, h, nil)
}

// run is Run; then, when final is not nil, it calls final with the after
// hooks' context (carrying p), after the last after hook.
func (r *Runner) run(ctx context.Context, p *Pipeline, h HandlerFunc, final func(ctx context.Context)) (any, error) {
	if p.ctx == nil {
		p.ctx = ctx
	}
	a := &p.after
	a.reset(ctx, r, p, final)
	// A hook, the handler or final that calls runtime.Goexit (t.FailNow in
	// a test handler) ends the goroutine without a panic to recover: the
	// after hooks still run, once each, as the goroutine unwinds.
	defer a.goexit()
	for _, m := range r.mws {
		a.started++
		if perr := Recover("BeforeDispatch", func() { m.BeforeDispatch(ctx, p) }); perr != nil {
			p.fail(perr)
			break
		}
		if p.halted {
			break
		}
	}

	if p.err == nil && !p.halted {
		r.handle(ctx, p, h)
	}
	a.finish()
	return p.response, p.err
}

// errGoexit is the command's error when runtime.Goexit ended its run.
var errGoexit = errors.New("middleware: runtime.Goexit called during the run")

// afterRun runs the after hooks of one run and final, each once, resuming
// where it stopped when a call ends the goroutine with runtime.Goexit.
type afterRun struct {
	r       *Runner
	ctx     context.Context
	p       *Pipeline
	final   func(ctx context.Context)
	started int // middleware whose BeforeDispatch started

	begun       bool // the after hooks have begun
	failed      bool
	next        int        // the next after hook to run, counted down
	actx        releaseCtx // the after hooks' context
	finalCalled bool       // final was called
	complete    bool       // finish returned
}

// reset readies a for a run of p.
func (a *afterRun) reset(ctx context.Context, r *Runner, p *Pipeline, final func(ctx context.Context)) {
	a.r, a.ctx, a.p, a.final, a.started = r, ctx, p, final, 0
	a.begun, a.failed, a.next, a.finalCalled, a.complete = false, false, 0, false, false
	a.actx.reset()
}

// finish runs the after hooks in reverse order, then final.
func (a *afterRun) finish() {
	if !a.begun {
		a.begun = true
		a.actx.init(a.ctx, a.r.releaseTimeout)
		a.failed = a.p.err != nil || a.p.halted
		a.next = a.started - 1
	}
	for a.next >= 0 {
		m := a.r.mws[a.next]
		a.next--
		// An after hook that failed the command (Fail, a panic) makes the
		// outer hooks see a failure.
		a.failed = a.failed || a.p.err != nil
		var perr error
		if a.failed {
			perr = Recover("AfterFailure", func() { m.AfterFailure(&a.actx, a.p) })
		} else {
			perr = Recover("AfterDispatch", func() { m.AfterDispatch(&a.actx, a.p) })
		}
		if perr != nil {
			a.p.fail(perr)
		}
	}
	if !a.finalCalled {
		a.finalCalled = true
		// The failure is logged before final answers the sender, so that
		// the log holds it by the time the sender knows.
		if l := a.r.failLog; l != nil && (a.p.err != nil || a.p.halted) {
			logFailure(&a.actx, l, a.p)
		}
		if a.final != nil {
			a.final(withPipeline(&a.actx, a.p))
		}
	}
	a.actx.end()
	a.complete = true
}

// goexit finishes the run when runtime.Goexit cut it short.
func (a *afterRun) goexit() {
	if a.complete {
		return
	}
	a.p.fail(errGoexit)
	a.finish()
}

// handle runs h unless ctx or the handler's context is done.
func (r *Runner) handle(ctx context.Context, p *Pipeline, h HandlerFunc) {
	hctx := p.Context()
	if c := cmp.Or(doneCtx(ctx), doneCtx(hctx)); c != nil {
		err := fmt.Errorf("middleware: command %s %s not handled: %w", p.CommandName, p.CommandUUID, c.Err())
		if cause := context.Cause(c); cause != nil && !errors.Is(cause, c.Err()) {
			err = fmt.Errorf("%w: %w", err, cause)
		}
		p.fail(err)
		return
	}
	p.hctx = handlerCtx{Context: hctx, p: p}
	hctx = &p.hctx
	var res any
	var err error
	if perr := Recover("handler", func() { res, err = h(hctx, p) }); perr != nil {
		p.fail(perr)
		return
	}
	p.handled = true
	if err != nil {
		p.fail(err)
		return
	}
	p.Respond(res)
}

// doneCtx returns ctx when it is done, and nil otherwise.
func doneCtx(ctx context.Context) context.Context {
	if ctx.Err() != nil {
		return ctx
	}
	return nil
}
