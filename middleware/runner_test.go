package middleware_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/claimbus/claimbus/middleware"
)

// recorder keeps the order in which hooks and handlers ran.
type recorder struct {
	mu     sync.Mutex
	events []string
}

func (r *recorder) add(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, fmt.Sprintf(format, args...))
}

func (r *recorder) list() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.events...)
}

// hookFunc is the extra behaviour of one hook of a recording middleware.
type hookFunc func(ctx context.Context, p *middleware.Pipeline, rec *recorder)

// recMW records its hooks as "<name>.<hook>" and runs the extra behaviour
// given for them, keyed the same way.
type recMW struct {
	name  string
	rec   *recorder
	hooks map[string]hookFunc
}

func (m *recMW) call(hook string, ctx context.Context, p *middleware.Pipeline) {
	key := m.name + "." + hook
	m.rec.add("%s", key)
	if f := m.hooks[key]; f != nil {
		f(ctx, p, m.rec)
	}
}

func (m *recMW) BeforeDispatch(ctx context.Context, p *middleware.Pipeline) { m.call("before", ctx, p) }
func (m *recMW) AfterDispatch(ctx context.Context, p *middleware.Pipeline) {
	m.call("afterDispatch", ctx, p)
}
func (m *recMW) AfterFailure(ctx context.Context, p *middleware.Pipeline) {
	m.call("afterFailure", ctx, p)
}

type ctxKey string

var errHandler = errors.New("handler failed")

func TestRunnerSemantics(t *testing.T) {
	t.Parallel()
	const releaseTimeout = 3 * time.Second
	okHandler := func(_ context.Context, _ *middleware.Pipeline, rec *recorder) (any, error) {
		rec.add("handler")
		return "result", nil
	}
	before3 := []string{"m1.before", "m2.before", "m3.before"}
	dispatched := append(append([]string{}, before3...), "handler", "m3.afterDispatch", "m2.afterDispatch", "m1.afterDispatch")
	failed := append(append([]string{}, before3...), "handler", "m3.afterFailure", "m2.afterFailure", "m1.afterFailure")
	skipped := append(append([]string{}, before3...), "m3.afterFailure", "m2.afterFailure", "m1.afterFailure")

	tests := []struct {
		name    string
		hooks   map[string]hookFunc
		handler func(ctx context.Context, p *middleware.Pipeline, rec *recorder) (any, error)
		// ctx, when set, gives the run's context.
		ctx        func() context.Context
		wantEvents []string
		wantResp   any
		checkErr   func(t *testing.T, err error)
		check      func(t *testing.T, p *middleware.Pipeline)
	}{
		{
			name:       "success runs after-dispatch in reverse order",
			handler:    okHandler,
			wantEvents: dispatched,
			wantResp:   "result",
			checkErr:   func(t *testing.T, err error) { require.NoError(t, err) },
			check: func(t *testing.T, p *middleware.Pipeline) {
				require.False(t, p.Halted())
				require.True(t, middleware.Handled(p))
			},
		},
		{
			name: "halt in the second of three stops the third and the handler",
			hooks: map[string]hookFunc{
				"m2.before": func(_ context.Context, p *middleware.Pipeline, _ *recorder) {
					p.Halt(middleware.Reject(middleware.CodeAlreadyTaken, "email", "ann@x.org is taken"))
				},
			},
			handler:    okHandler,
			wantEvents: []string{"m1.before", "m2.before", "m2.afterFailure", "m1.afterFailure"},
			checkErr: func(t *testing.T, err error) {
				require.ErrorIs(t, err, middleware.ErrAlreadyTaken)
				var rej *middleware.Rejection
				require.ErrorAs(t, err, &rej)
				require.Equal(t, "email", rej.Field)
			},
			check: func(t *testing.T, p *middleware.Pipeline) {
				require.True(t, p.Halted())
				require.False(t, middleware.Handled(p))
			},
		},
		{
			name: "handler error runs after-failure in reverse order",
			handler: func(_ context.Context, _ *middleware.Pipeline, rec *recorder) (any, error) {
				rec.add("handler")
				return "ignored", errHandler
			},
			wantEvents: failed,
			checkErr:   func(t *testing.T, err error) { require.ErrorIs(t, err, errHandler) },
			check: func(t *testing.T, p *middleware.Pipeline) {
				require.True(t, middleware.Handled(p), "a handler that returned an error was handled")
				require.ErrorIs(t, p.Err(), errHandler)
			},
		},
		{
			name: "handler panic becomes a PanicError and runs after-failure",
			handler: func(_ context.Context, _ *middleware.Pipeline, rec *recorder) (any, error) {
				rec.add("handler")
				panic("boom")
			},
			wantEvents: failed,
			checkErr: func(t *testing.T, err error) {
				var perr *middleware.PanicError
				require.ErrorAs(t, err, &perr)
				require.Equal(t, "handler", perr.Where)
				require.Equal(t, "boom", perr.Value)
				require.NotEmpty(t, perr.Stack)
			},
			check: func(t *testing.T, p *middleware.Pipeline) { require.False(t, middleware.Handled(p)) },
		},
		{
			name: "handler panic with an error keeps it in the chain",
			handler: func(context.Context, *middleware.Pipeline, *recorder) (any, error) {
				panic(errHandler)
			},
			wantEvents: skipped,
			checkErr:   func(t *testing.T, err error) { require.ErrorIs(t, err, errHandler) },
		},
		{
			name: "BeforeDispatch panic stops the rest and runs after-failure from the panicking one",
			hooks: map[string]hookFunc{
				"m2.before": func(context.Context, *middleware.Pipeline, *recorder) { panic("before boom") },
			},
			handler:    okHandler,
			wantEvents: []string{"m1.before", "m2.before", "m2.afterFailure", "m1.afterFailure"},
			checkErr: func(t *testing.T, err error) {
				var perr *middleware.PanicError
				require.ErrorAs(t, err, &perr)
				require.Equal(t, "BeforeDispatch", perr.Where)
			},
		},
		{
			name: "AfterDispatch panic does not stop the others, becomes the error, and the outer hooks see a failure",
			hooks: map[string]hookFunc{
				"m2.afterDispatch": func(context.Context, *middleware.Pipeline, *recorder) { panic("after boom") },
			},
			handler:    okHandler,
			wantEvents: append(append([]string{}, before3...), "handler", "m3.afterDispatch", "m2.afterDispatch", "m1.afterFailure"),
			wantResp:   "result",
			checkErr: func(t *testing.T, err error) {
				var perr *middleware.PanicError
				require.ErrorAs(t, err, &perr)
				require.Equal(t, "AfterDispatch", perr.Where)
			},
		},
		{
			name: "AfterFailure panic does not stop the others and becomes the error",
			hooks: map[string]hookFunc{
				"m3.before":       func(_ context.Context, p *middleware.Pipeline, _ *recorder) { p.Halt(nil) },
				"m3.afterFailure": func(context.Context, *middleware.Pipeline, *recorder) { panic("release boom") },
				"m2.afterFailure": func(context.Context, *middleware.Pipeline, *recorder) { panic("second boom") },
			},
			handler:    okHandler,
			wantEvents: skipped,
			checkErr: func(t *testing.T, err error) {
				var perr *middleware.PanicError
				require.ErrorAs(t, err, &perr)
				require.Equal(t, "AfterFailure", perr.Where)
				require.Equal(t, "release boom", perr.Value, "the first panic is the error")
			},
		},
		{
			name: "AfterFailure panic keeps the handler's earlier error",
			hooks: map[string]hookFunc{
				"m2.afterFailure": func(context.Context, *middleware.Pipeline, *recorder) { panic("release boom") },
			},
			handler: func(_ context.Context, _ *middleware.Pipeline, rec *recorder) (any, error) {
				rec.add("handler")
				return nil, errHandler
			},
			wantEvents: failed,
			checkErr:   func(t *testing.T, err error) { require.ErrorIs(t, err, errHandler) },
		},
		{
			name: "ctx done before the handler skips it",
			ctx: func() context.Context {
				ctx, cancel := context.WithCancel(context.Background())
				cancel()
				return ctx
			},
			handler:    okHandler,
			wantEvents: skipped,
			checkErr:   func(t *testing.T, err error) { require.ErrorIs(t, err, context.Canceled) },
			check:      func(t *testing.T, p *middleware.Pipeline) { require.False(t, middleware.Handled(p)) },
		},
		{
			name: "a handler context cancelled by a hook skips the handler and names the cause",
			hooks: map[string]hookFunc{
				"m2.before": func(_ context.Context, p *middleware.Pipeline, _ *recorder) {
					ctx, cancel := context.WithCancelCause(p.Context())
					cancel(errors.New("claim lost"))
					p.SetContext(ctx)
				},
			},
			handler:    okHandler,
			wantEvents: skipped,
			checkErr: func(t *testing.T, err error) {
				require.ErrorIs(t, err, context.Canceled)
				require.ErrorContains(t, err, "claim lost")
			},
		},
		{
			name: "after hooks get an uncancelled context with a deadline",
			hooks: map[string]hookFunc{
				"m1.afterDispatch": func(ctx context.Context, _ *middleware.Pipeline, rec *recorder) {
					deadline, ok := ctx.Deadline()
					rec.add("after ctx err=%v deadline=%v bounded=%v", ctx.Err(), ok, time.Until(deadline) <= releaseTimeout)
					rec.add("after ctx value=%v", ctx.Value(ctxKey("run")))
				},
			},
			ctx: func() context.Context {
				return context.WithValue(context.Background(), ctxKey("run"), "kept")
			},
			handler: func(ctx context.Context, _ *middleware.Pipeline, rec *recorder) (any, error) {
				rec.add("handler")
				cancel := ctx.Value(ctxKey("cancel")).(context.CancelFunc)
				cancel() // the sender goes away while the handler runs
				return "result", nil
			},
			wantEvents: append(append([]string{}, dispatched...),
				"after ctx err=<nil> deadline=true bounded=true", "after ctx value=kept"),
			wantResp: "result",
			checkErr: func(t *testing.T, err error) { require.NoError(t, err) },
		},
		{
			name: "Respond first wins",
			hooks: map[string]hookFunc{
				"m1.before": func(_ context.Context, p *middleware.Pipeline, rec *recorder) {
					rec.add("respond early=%v", p.Respond("early"))
					rec.add("respond again=%v", p.Respond("again"))
				},
			},
			handler: okHandler,
			wantEvents: []string{"m1.before", "respond early=true", "respond again=false", "m2.before", "m3.before",
				"handler", "m3.afterDispatch", "m2.afterDispatch", "m1.afterDispatch"},
			wantResp: "early",
			checkErr: func(t *testing.T, err error) { require.NoError(t, err) },
		},
		{
			name: "halt with a nil error returns the response",
			hooks: map[string]hookFunc{
				"m2.before": func(_ context.Context, p *middleware.Pipeline, _ *recorder) {
					p.Respond("already done")
					p.Halt(nil)
				},
			},
			handler:    okHandler,
			wantEvents: []string{"m1.before", "m2.before", "m2.afterFailure", "m1.afterFailure"},
			wantResp:   "already done",
			checkErr:   func(t *testing.T, err error) { require.NoError(t, err) },
			check:      func(t *testing.T, p *middleware.Pipeline) { require.True(t, p.Halted()) },
		},
		{
			name: "a hook replaces the handler context",
			hooks: map[string]hookFunc{
				"m2.before": func(_ context.Context, p *middleware.Pipeline, _ *recorder) {
					p.SetContext(context.WithValue(p.Context(), ctxKey("tx"), "tx-1"))
				},
			},
			handler: func(ctx context.Context, p *middleware.Pipeline, rec *recorder) (any, error) {
				got, ok := middleware.PipelineFromContext(ctx)
				ids, _ := middleware.IDsFromContext(ctx)
				rec.add("handler tx=%v pipeline=%v ids=%+v", ctx.Value(ctxKey("tx")), ok && got == p, ids)
				return nil, nil
			},
			wantEvents: append(append([]string{}, before3...),
				"handler tx=tx-1 pipeline=true ids={CorrelationID:corr-1 CausationID:cmd-1}",
				"m3.afterDispatch", "m2.afterDispatch", "m1.afterDispatch"),
			checkErr: func(t *testing.T, err error) { require.NoError(t, err) },
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			rec := &recorder{}
			var mws []middleware.Middleware
			for _, name := range []string{"m1", "m2", "m3"} {
				mws = append(mws, &recMW{name: name, rec: rec, hooks: tt.hooks})
			}
			r, err := middleware.NewRunner(middleware.RunnerConfig{Middleware: mws, ReleaseTimeout: releaseTimeout})
			require.NoError(t, err)

			ctx := context.Background()
			if tt.ctx != nil {
				ctx = tt.ctx()
			}
			ctx, cancel := context.WithCancel(ctx)
			defer cancel()
			ctx = context.WithValue(ctx, ctxKey("cancel"), cancel)

			p := middleware.NewPipeline(ctx, &struct{ Email string }{"ann@x.org"})
			p.CommandName, p.CommandUUID, p.CorrelationID = "CreateStaff", "cmd-1", "corr-1"
			handled := 0
			resp, err := r.Run(ctx, p, func(ctx context.Context, p *middleware.Pipeline) (any, error) {
				handled++
				return tt.handler(ctx, p, rec)
			})
			tt.checkErr(t, err)
			require.Equal(t, tt.wantResp, resp)
			require.Equal(t, tt.wantEvents, rec.list())
			require.LessOrEqual(t, handled, 1)
			if tt.check != nil {
				tt.check(t, p)
			}
		})
	}
}

func TestRunnerConfigValidate(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		cfg     middleware.RunnerConfig
		wantErr []string
	}{
		{name: "zero value is valid", cfg: middleware.RunnerConfig{}},
		{
			name:    "every problem is reported",
			cfg:     middleware.RunnerConfig{Middleware: []middleware.Middleware{middleware.Hooks{}, nil}, ReleaseTimeout: -time.Second},
			wantErr: []string{"Middleware[1] is nil", "ReleaseTimeout is negative"},
		},
		{
			name: "claims, then what answers repeats",
			cfg: middleware.RunnerConfig{Middleware: []middleware.Middleware{
				middleware.Hooks{}, staged{middleware.StageClaim}, middleware.Hooks{}, staged{middleware.StageAnswer},
			}},
			wantErr: []string{"Middleware[3] (middleware_test.staged) answers repeats from a store but comes after Middleware[1]", "put it before"},
		},
		{
			name: "what answers repeats, then claims",
			cfg: middleware.RunnerConfig{Middleware: []middleware.Middleware{
				staged{middleware.StageAnswer}, middleware.Hooks{}, staged{middleware.StageClaim}, staged{middleware.StageClaim},
			}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := tt.cfg.Validate()
			if len(tt.wantErr) == 0 {
				require.NoError(t, err)
				return
			}
			for _, want := range tt.wantErr {
				require.ErrorContains(t, err, want)
			}
			_, nerr := middleware.NewRunner(tt.cfg)
			require.Error(t, nerr)
		})
	}
}

// TestRunnerConcurrent runs one runner from many goroutines: every run
// gets its own before and after hooks, exactly once.
func TestRunnerConcurrent(t *testing.T) {
	t.Parallel()
	var before, after, handled atomic.Int64
	m := middleware.Hooks{
		OnBeforeDispatch: func(_ context.Context, p *middleware.Pipeline) {
			before.Add(1)
			p.Assign("n", p.CommandUUID)
			if p.CommandUUID[len(p.CommandUUID)-1] == '7' {
				p.Halt(middleware.ErrLocked)
			}
		},
		OnAfterDispatch: func(_ context.Context, p *middleware.Pipeline) {
			v, _ := p.Assigned("n")
			if v == p.CommandUUID {
				after.Add(1)
			}
		},
		OnAfterFailure: func(_ context.Context, p *middleware.Pipeline) {
			v, _ := p.Assigned("n")
			if v == p.CommandUUID {
				after.Add(1)
			}
		},
	}
	r, err := middleware.NewRunner(middleware.RunnerConfig{Middleware: []middleware.Middleware{m, m, m}})
	require.NoError(t, err)
	const goroutines, perG = 16, 200
	var wg sync.WaitGroup
	var halted atomic.Int64
	for g := range goroutines {
		wg.Go(func() {
			for i := range perG {
				p := middleware.NewPipeline(context.Background(), nil)
				p.CommandUUID = fmt.Sprintf("%d-%d", g, i)
				_, err := r.Run(context.Background(), p, func(context.Context, *middleware.Pipeline) (any, error) {
					handled.Add(1)
					return nil, nil
				})
				if errors.Is(err, middleware.ErrLocked) {
					halted.Add(1)
				}
			}
		})
	}
	wg.Wait()
	total := int64(goroutines * perG)
	require.Equal(t, total-halted.Load(), handled.Load())
	require.Equal(t, before.Load(), after.Load())
	require.Equal(t, 3*(total-halted.Load())+halted.Load(), before.Load(), "a halt in the first middleware stops the other two")
	require.Positive(t, halted.Load())
}

// runtime.Goexit (t.FailNow in a handler, say) ends the run's goroutine
// with nothing to recover: the after hooks still run, once each, with a
// live context, and the command fails.
func TestRunnerGoexit(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name       string
		exitAt     string // the hook or "handler" that calls runtime.Goexit
		wantEvents []string
	}{
		{"in the handler", "handler", []string{"m1.before", "m2.before", "m3.before", "handler", "m3.afterFailure", "m2.afterFailure", "m1.afterFailure"}},
		{"in a before hook", "m2.before", []string{"m1.before", "m2.before", "m2.afterFailure", "m1.afterFailure"}},
		{"in an after hook", "m2.afterDispatch", []string{"m1.before", "m2.before", "m3.before", "handler", "m3.afterDispatch", "m2.afterDispatch", "m1.afterFailure"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			rec := &recorder{}
			var afterCtxErr atomic.Value
			hooks := map[string]hookFunc{tt.exitAt: func(context.Context, *middleware.Pipeline, *recorder) { runtime.Goexit() }}
			for _, h := range []string{"m1.afterFailure", "m1.afterDispatch"} {
				if h != tt.exitAt {
					hooks[h] = func(ctx context.Context, p *middleware.Pipeline, _ *recorder) {
						afterCtxErr.Store(fmt.Sprint(ctx.Err(), p.Err()))
					}
				}
			}
			mws := make([]middleware.Middleware, 3)
			for i := range mws {
				mws[i] = &recMW{name: fmt.Sprintf("m%d", i+1), rec: rec, hooks: hooks}
			}
			r, err := middleware.NewRunner(middleware.RunnerConfig{Middleware: mws})
			require.NoError(t, err)
			ended := make(chan struct{})
			go func() {
				defer close(ended)
				_, _ = r.Run(context.Background(), middleware.NewPipeline(context.Background(), nil),
					func(context.Context, *middleware.Pipeline) (any, error) {
						rec.add("handler")
						if tt.exitAt == "handler" {
							runtime.Goexit()
						}
						return nil, nil
					})
				rec.add("returned")
			}()
			<-ended
			require.Equal(t, tt.wantEvents, rec.list(), "after hooks once each, and Run never returns")
			require.Equal(t, "<nil> middleware: runtime.Goexit called during the run", afterCtxErr.Load())
		})
	}
}

// The after hooks' context ends at the release timeout for a hook that
// waits on it, and is cancelled (its timer stopped) once the run is over.
func TestRunnerAfterContextEnds(t *testing.T) {
	t.Parallel()
	kept := make(chan context.Context, 2)
	waiting := middleware.Hooks{OnAfterDispatch: func(ctx context.Context, _ *middleware.Pipeline) {
		<-ctx.Done() // ends at the release timeout
		kept <- ctx
	}}
	idle := middleware.Hooks{OnAfterDispatch: func(ctx context.Context, _ *middleware.Pipeline) {
		kept <- ctx // never waited on: no timer, cancelled all the same
	}}
	r, err := middleware.NewRunner(middleware.RunnerConfig{
		Middleware:     []middleware.Middleware{waiting, idle},
		ReleaseTimeout: 20 * time.Millisecond,
	})
	require.NoError(t, err)
	_, err = r.Run(context.Background(), middleware.NewPipeline(context.Background(), nil), noopHandler)
	require.NoError(t, err)
	idleCtx, waitingCtx := <-kept, <-kept
	require.ErrorIs(t, waitingCtx.Err(), context.DeadlineExceeded)
	require.ErrorIs(t, idleCtx.Err(), context.DeadlineExceeded, "the same context for every hook")

	r, err = middleware.NewRunner(middleware.RunnerConfig{Middleware: []middleware.Middleware{idle}, ReleaseTimeout: time.Hour})
	require.NoError(t, err)
	_, err = r.Run(context.Background(), middleware.NewPipeline(context.Background(), nil), noopHandler)
	require.NoError(t, err)
	ctx := <-kept
	require.ErrorIs(t, ctx.Err(), context.Canceled, "the run is over an hour before the deadline")
	select {
	case <-ctx.Done():
	default:
		t.Fatal("Done is open after the run")
	}
}

func TestRecover(t *testing.T) {
	t.Parallel()
	ran := false
	require.NoError(t, middleware.Recover("f", func() { ran = true }))
	require.True(t, ran)

	err := middleware.Recover("lookup", func() { panic(errHandler) })
	var perr *middleware.PanicError
	require.ErrorAs(t, err, &perr)
	require.Equal(t, "lookup", perr.Where)
	require.Equal(t, errHandler, perr.Value)
	require.Contains(t, string(perr.Stack), "TestRecover")
	require.ErrorIs(t, err, errHandler, "an error panic value unwraps")
	require.EqualError(t, err, "middleware: panic in lookup: "+errHandler.Error())
}

// staged is a no-op middleware of a given Stage.
type staged struct{ stage middleware.Stage }

func (s staged) BeforeDispatch(context.Context, *middleware.Pipeline) {}
func (s staged) AfterDispatch(context.Context, *middleware.Pipeline)  {}
func (s staged) AfterFailure(context.Context, *middleware.Pipeline)   {}
func (s staged) Stage() middleware.Stage                              { return s.stage }
