package observe_test

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/claimbus/claimbus/internal/observe"
)

// recorder is a Tracer that records the steps it is told about.
type recorder struct {
	started []string
	ended   []error
}

type stepKey struct{}

func (r *recorder) StartStep(ctx context.Context, step, detail string) (context.Context, observe.EndFunc) {
	r.started = append(r.started, step+" "+detail)
	return context.WithValue(ctx, stepKey{}, step), func(err error) { r.ended = append(r.ended, err) }
}

func TestStartStepWithoutTracer(t *testing.T) { // not parallel: AllocsPerRun
	ctx := context.Background()
	got, end := observe.StartStep(ctx, observe.StepLookup, "email")
	require.Equal(t, ctx, got, "without a tracer the context is the same")
	end(errors.New("ignored"))
	allocs := testing.AllocsPerRun(100, func() {
		_, end := observe.StartStep(ctx, observe.StepLock, "user.email")
		end(nil)
	})
	require.Zero(t, allocs, "an untraced step allocates nothing")
	require.Nil(t, observe.TracerFromContext(ctx))
}

func TestStartStepWithTracer(t *testing.T) {
	t.Parallel()
	r := &recorder{}
	ctx := observe.ContextWithTracer(context.Background(), r)
	require.Same(t, r, observe.TracerFromContext(ctx))
	wctx, endWait := observe.StartStep(ctx, observe.StepClaimWait, "email")
	require.Equal(t, observe.StepClaimWait, wctx.Value(stepKey{}), "the step's context is the tracer's")
	_, endLock := observe.StartStep(wctx, observe.StepLock, "user.email")
	boom := errors.New("boom")
	endLock(boom)
	endWait(nil)
	require.Equal(t, []string{"claimbus.claim.wait email", "claimbus.lock user.email"}, r.started)
	require.Equal(t, []error{boom, nil}, r.ended)
	require.Nil(t, observe.TracerFromContext(observe.ContextWithTracer(ctx, nil)), "a nil tracer removes it")
}

// BenchmarkStartStepUnset is the cost of a step nobody traces, with the
// tracer looked up through a context chain three deep (what the hooks
// of a bus command have).
func BenchmarkStartStepUnset(b *testing.B) {
	type k struct{ int }
	ctx := context.Background()
	for i := range 3 {
		ctx = context.WithValue(ctx, k{i}, i)
	}
	b.ReportAllocs()
	for b.Loop() {
		_, end := observe.StartStep(ctx, observe.StepLookup, "email")
		end(nil)
	}
}
