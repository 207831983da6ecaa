package main

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.uber.org/goleak"

	"github.com/claimbus/claimbus/telemetry"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// Across two instances: the duplicate email on the other instance is
// refused 409 already_taken naming the field, and the retry with the
// first request's Idempotency-Key, on the other instance, gets the first
// answer (a run of its own would have met the email taken); every
// command is traced, with the idempotency step.
func TestAdoption(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { require.NoError(t, tp.Shutdown(context.Background())) })
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	lines, err := run(ctx, telemetry.Config{TracerProvider: tp})
	require.NoError(t, err)
	require.Equal(t, []string{
		"instance 0: ann@example.org: 201 s-1",
		"instance 1: ANN@example.org: 409 already_taken (email)",
		"instance 1: ann@example.org: 201 s-1",
	}, lines)

	outcomes := map[string]int{}
	steps := 0
	for _, s := range rec.Ended() {
		if s.Name() == "claimbus.idempotency" {
			steps++
		}
		for _, a := range s.Attributes() {
			if a.Key == "claimbus.outcome" {
				outcomes[a.Value.AsString()]++
			}
		}
	}
	// The repeat is halted as done by the stored answer: an ok outcome.
	require.Equal(t, map[string]int{"ok": 2, "rejected": 1}, outcomes)
	require.Equal(t, 2, steps, "one idempotency step per command with a key")
}
