package uniqueness_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/claimbus/claimbus/claimstore"
	"github.com/claimbus/claimbus/commands"
	"github.com/claimbus/claimbus/internal/observe"
	"github.com/claimbus/claimbus/middleware"
	"github.com/claimbus/claimbus/uniqueness"
)

// stepLog is an observe.Tracer that logs each step as it starts and ends.
type stepLog struct {
	mu    sync.Mutex
	steps []string
}

func (s *stepLog) StartStep(ctx context.Context, step, detail string) (context.Context, observe.EndFunc) {
	s.add("start " + step + " " + detail)
	return ctx, func(err error) {
		outcome := "ok"
		if err != nil {
			outcome = "failed"
		}
		s.add("end " + step + " " + outcome)
	}
}

func (s *stepLog) add(line string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.steps = append(s.steps, line)
}

// TestStepsReachThePipelineTracer runs a command with a reserving rule
// through a runner whose first hook sets a tracer: the middleware reports
// its claim wait (with the lock, the lookup and the reservation inside)
// and the holding of the claim. The confirmation after the handler lands
// after the answer (see confirmLater), outside the command's steps.
func TestStepsReachThePipelineTracer(t *testing.T) {
	t.Parallel()
	table := newEventTable()
	mw := newUniqueness(t, uniqueness.Config{Locker: newMemory(t),
		Rules: []uniqueness.Rule{eventRule(table, claimstore.NewMemory(claimstore.MemoryConfig{}), time.Hour)}})
	log := &stepLog{}
	setTracer := middleware.Hooks{OnBeforeDispatch: func(_ context.Context, p *middleware.Pipeline) {
		p.SetContext(observe.ContextWithTracer(p.Context(), log))
	}}
	runner, err := middleware.NewRunner(middleware.RunnerConfig{Middleware: []middleware.Middleware{setTracer, mw}})
	require.NoError(t, err)

	p := middleware.NewPipeline(context.Background(), &commands.CreateStaff{StaffID: "s1", Email: "ann@x.org", Name: "Ann"})
	p.CommandName, p.CommandUUID = "commands.CreateStaff", "id-1"
	_, err = runner.Run(context.Background(), p, func(ctx context.Context, p *middleware.Pipeline) (any, error) {
		log.add("handler")
		return eventHandler(table)(ctx, p.Command.(*commands.CreateStaff))
	})
	require.NoError(t, err)
	require.Equal(t, []string{
		"start claimbus.claim.wait email",
		"start claimbus.lock staff.email",
		"end claimbus.lock ok",
		"start claimbus.lookup email",
		"end claimbus.lookup ok",
		"start claimbus.reservation.write email",
		"end claimbus.reservation.write ok",
		"end claimbus.claim.wait ok",
		"start claimbus.claim.hold commands.CreateStaff",
		"handler",
		"end claimbus.claim.hold ok",
	}, log.steps)
}
