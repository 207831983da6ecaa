package idempotency

import (
	"context"
	"errors"
	"log/slog"
	"time"
)

// Purge deletes the outcomes whose retention has passed, in pages of
// Config.PurgeBatch, and returns how many it deleted. Expired outcomes are
// never answered, purged or not; Purge only frees their room. Nothing runs
// it on its own: call it now and then (RunPurger does it on a ticker).
// Several nodes may purge at once.
func (m *Middleware) Purge(ctx context.Context) (int, error) {
	total := 0
	for {
		n, err := m.store.PurgeOutcomes(ctx, m.batch)
		total += n
		if err != nil || n < m.batch {
			return total, err
		}
	}
}

// RunPurger calls Purge every interval until ctx ends, and then returns
// ctx's error. A failed purge is logged at Warn and tried again at the next
// tick. It blocks: the caller owns the goroutine it runs on.
func (m *Middleware) RunPurger(ctx context.Context, interval time.Duration) error {
	if interval <= 0 {
		return errors.New("idempotency: RunPurger: interval must be positive")
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
			if n, err := m.Purge(ctx); err != nil && ctx.Err() == nil {
				m.logger.LogAttrs(ctx, slog.LevelWarn, "idempotency purge failed", slog.Int("purged", n), slog.Any("error", err))
			}
		}
	}
}
