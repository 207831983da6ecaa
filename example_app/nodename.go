package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/cenkalti/backoff/v5"

	"github.com/claimbus/claimbus/example_app/app"
	"github.com/claimbus/claimbus/lockstore"
)

// Backoff of the retaking of a lost node name.
const (
	retakeFirst = 100 * time.Millisecond
	retakeMax   = 2 * time.Second
)

// nameHolder holds the node's name as a lock while the node runs, and
// retakes it when it is lost (the session that held it ended, as when the
// database restarts): meanwhile the node is unavailable.
type nameHolder struct {
	store  lockstore.Locker
	key    lockstore.Key
	node   *app.Node
	logger *slog.Logger

	mu   sync.Mutex
	lock lockstore.Lock // nil while lost
}

// errNameTaken is the error of a name taken by another live node.
func errNameTaken(name string) error {
	return fmt.Errorf("another live node is named %q on this database: give each node its own -node", name)
}

// watch runs until ctx ends (nil) or the name is taken by another live
// node (errNameTaken): on each loss it makes the node unavailable, retakes
// the name with backoff while the store answers ErrUnavailable, and makes
// the node available again once it holds it.
func (h *nameHolder) watch(ctx context.Context) error {
	for {
		h.mu.Lock()
		l := h.lock
		h.mu.Unlock()
		select {
		case <-ctx.Done():
			return nil
		case <-l.Lost():
		}
		h.node.SetUnavailable(app.ReasonNodeNameLost)
		h.logger.Error("the node lost the lock on its name: not taking commands until it is retaken")
		lost := time.Now()
		_ = l.Release(context.Background()) // reports ErrLockLost: it is gone already
		h.mu.Lock()
		h.lock = nil
		h.mu.Unlock()
		nl, err := h.retake(ctx)
		if err != nil || nl == nil {
			return err
		}
		h.mu.Lock()
		h.lock = nl
		h.mu.Unlock()
		h.node.SetAvailable()
		h.logger.Info("the node retook the lock on its name: taking commands again", "after", time.Since(lost).Round(time.Millisecond))
	}
}

// retake takes the name again, with backoff while the store is
// unavailable; nil, nil when ctx ends first.
func (h *nameHolder) retake(ctx context.Context) (lockstore.Lock, error) {
	// Jitter: every node lost its name in the same outage, and they should
	// not all try again in step.
	b := &backoff.ExponentialBackOff{InitialInterval: retakeFirst, RandomizationFactor: 0.5, Multiplier: 2, MaxInterval: retakeMax}
	b.Reset()
	timer := time.NewTimer(0)
	defer timer.Stop()
	<-timer.C
	for {
		l, err := h.store.TryLock(ctx, h.key)
		switch {
		case err == nil:
			return l, nil
		case errors.Is(err, lockstore.ErrLocked):
			h.logger.Error("another live node took this node's name while it was lost: stopping", "name", h.key.ID)
			return nil, errNameTaken(h.key.ID)
		case ctx.Err() != nil:
			return nil, nil
		default:
			h.logger.Debug("retaking the node name", "error", err)
		}
		timer.Reset(min(b.NextBackOff(), retakeMax))
		select {
		case <-ctx.Done():
			return nil, nil
		case <-timer.C:
		}
	}
}

// release lets the name go, when the node holds it.
func (h *nameHolder) release() error {
	h.mu.Lock()
	l := h.lock
	h.lock = nil
	h.mu.Unlock()
	if l == nil {
		return nil
	}
	if err := l.Release(context.Background()); err != nil && !errors.Is(err, lockstore.ErrLockLost) {
		return err
	}
	return nil
}
