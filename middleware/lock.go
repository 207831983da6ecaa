package middleware

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/claimbus/claimbus/internal/afterlost"
	"github.com/claimbus/claimbus/internal/lockext"
	"github.com/claimbus/claimbus/lockstore"
)

// defaultLockAssignKey is the Assigns key under which Lock keeps the locks
// it holds when LockConfig.AssignKey is empty.
const defaultLockAssignKey = "lock"

// LockConfig configures the Lock middleware.
type LockConfig struct {
	// Locker hands out the locks, such as a lockstore.Memory or a
	// PostgreSQL store. Required.
	Locker lockstore.Locker
	// Keys names the resources each command locks, such as
	// lockstore.Key{Namespace: "transfer", ID: cmd.TransferID}. A command it
	// returns no key for passes through unlocked. Required.
	Keys func(cmd any) []lockstore.Key
	// Wait is how long a command waits for a held resource. 0, the default,
	// waits not at all: a held resource halts the command as locked
	// (ErrLocked). A positive Wait waits that long, first come first
	// served, and then halts the command as timed out (ErrTimeout).
	Wait time.Duration
	// AssignKey is the Assigns key under which the locks held are kept, as
	// a []lockstore.Lock in the order taken, for the handler (through
	// PipelineFromContext) and later hooks, such as to read a fencing token.
	// Default "lock". Two Lock middleware in one runner need
	// different keys.
	AssignKey string
	// Logger logs the errors of releases, which the after hooks cannot
	// return, with the command's id ("command_id") and the lock's key
	// ("key"): at Error when the lock was lost while the command ran (the
	// error matches lockstore.ErrLockLost), at Warn otherwise. Default
	// slog.Default().
	Logger *slog.Logger
}

// Validate reports every problem of the configuration.
func (c LockConfig) Validate() error {
	var errs []error
	if c.Locker == nil {
		errs = append(errs, errors.New("middleware: LockConfig.Locker is nil"))
	}
	if c.Keys == nil {
		errs = append(errs, errors.New("middleware: LockConfig.Keys is nil"))
	}
	if c.Wait < 0 {
		errs = append(errs, fmt.Errorf("middleware: LockConfig.Wait is negative (%v)", c.Wait))
	}
	return errors.Join(errs...)
}

// Lock returns a middleware that locks the resources a command names while
// it runs (a per-resource lock, such as one per transfer):
//   - BeforeDispatch takes the keys (in the store's order, so that two
//     commands never deadlock); a key held by another command halts this
//     one with a `locked` rejection (matching ErrLocked), or with a positive
//     Wait, waits for it up to Wait and then halts with `timeout`
//     (ErrTimeout); a lock store that fails halts it with `unavailable`
//     (ErrUnavailable) and an invalid key with `invalid` (ErrInvalid), as
//     RejectStoreError maps the store's errors; such a rejection's message
//     names the key, not the store's error, which is wrapped beside it
//     (errors.Is finds it, and the lockstore sentinel of the code, such as
//     lockstore.ErrLocked; they stay on this node). When
//     the command's own context ends during the wait, nothing is held and
//     the runner skips the handler as it does for any done context.
//   - While the handler runs, a lock that is lost (its lease ran out, the
//     store's connection broke) cancels the handler's context, with a cause
//     matching lockstore.ErrLockLost (see context.Cause).
//   - AfterDispatch and AfterFailure release the locks (and stop watching
//     them), whatever the outcome. A release that fails is logged (see
//     LockConfig.Logger), never dropped: a lock lost while the command ran
//     is an Error, since its handler may have written after another
//     command took the resource.
//
// A lock guards writes that commit before the after hooks run; a handler
// that keeps writing after its context is cancelled should check the
// lock's fencing token (Lock.Token) where it writes. With a store whose
// locks are leases (a memory store with a TTL), a handler that runs longer
// than the lease loses its lock: Lock does not refresh leases, so choose a
// TTL longer than the slowest handler (or refresh it from the handler, see
// lockstore.Refresher).
func Lock(cfg LockConfig) (Middleware, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	m := &lockMiddleware{
		locker:    cfg.Locker,
		keys:      cfg.Keys,
		wait:      cfg.Wait,
		assignKey: cfg.AssignKey,
		logger:    cfg.Logger,
	}
	if m.assignKey == "" {
		m.assignKey = defaultLockAssignKey
	}
	if m.logger == nil {
		m.logger = slog.Default()
	}
	m.stateKey = "\x00lock state " + m.assignKey
	return m, nil
}

type lockMiddleware struct {
	locker    lockstore.Locker
	keys      func(cmd any) []lockstore.Key
	wait      time.Duration
	assignKey string
	stateKey  string
	logger    *slog.Logger
}

// lockRun is what one run of the Lock middleware holds.
type lockRun struct {
	locks   []lockstore.Lock
	cancel  context.CancelCauseFunc // cancels the handler's context
	watches []lockWatch             // one per lock, registered with its store
}

// lockWatch cancels the handler's context when its lock is lost (see
// lockstore.AfterLost).
type lockWatch struct {
	node afterlost.Node
	lock lockstore.Lock
	run  *lockRun
}

// LockLost cancels the handler's context.
func (w *lockWatch) LockLost() {
	w.run.cancel(fmt.Errorf("middleware: lock %s lost while the command ran: %w", w.lock.Key(), lockstore.ErrLockLost))
}

// BeforeDispatch takes the command's locks or halts it.
func (m *lockMiddleware) BeforeDispatch(ctx context.Context, p *Pipeline) {
	keys := m.keys(p.Command)
	if len(keys) == 0 {
		return
	}
	keys = lockext.SortKeys(m.locker, slices.Clone(keys))

	wctx := ctx
	if m.wait > 0 {
		var cancel context.CancelFunc
		wctx, cancel = context.WithTimeout(ctx, m.wait)
		defer cancel()
	}
	locks := make([]lockstore.Lock, 0, len(keys))
	kept := false
	defer func() {
		// Release what was taken when a lock fails or the store panics.
		if !kept && len(locks) > 0 {
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), DefaultReleaseTimeout)
			defer cancel()
			m.release(rctx, p.CommandUUID, locks)
		}
	}()
	for _, key := range keys {
		var l lockstore.Lock
		var err error
		if m.wait > 0 {
			l, err = m.locker.Lock(wctx, key)
		} else {
			l, err = m.locker.TryLock(ctx, key)
		}
		if err != nil {
			if rej := m.rejection(ctx, key, err); rej != nil {
				p.Halt(rej)
			}
			return
		}
		locks = append(locks, l)
	}

	hctx, cancel := context.WithCancelCause(p.Context())
	run := &lockRun{locks: locks, cancel: cancel, watches: make([]lockWatch, len(locks))}
	for i, l := range locks {
		w := &run.watches[i]
		w.lock, w.run = l, run
		afterlost.Watch(l, &w.node, w)
	}
	kept = true
	p.SetContext(hctx)
	p.Assign(m.assignKey, locks)
	p.Assign(m.stateKey, run)
}

// rejection is the halt reason for a failure to take key, or nil when the
// command's own context ended (the runner then skips the handler). It is
// RejectStoreError's: err is wrapped beside the rejection, for errors.Is
// and the logs, and the message is for people and names the key, never
// err: a store's error can name a server, a port or a user, and the
// message crosses the wire.
func (m *lockMiddleware) rejection(ctx context.Context, key lockstore.Key, err error) error {
	if code := storeErrorCode(err); code != CodeLocked && code != CodeInvalid && ctx.Err() != nil {
		return nil //nolint:nilerr // the sender went away: no rejection, the runner skips the handler
	}
	return RejectStoreError(err, "", func(code string) string {
		switch {
		case code == CodeLocked:
			return fmt.Sprintf("%s is locked", key)
		case code == CodeInvalid:
			return fmt.Sprintf("%s cannot be locked: its id is empty, too long or not UTF-8", key)
		case errors.Is(err, context.DeadlineExceeded):
			return fmt.Sprintf("%s still locked after %v", key, m.wait)
		case code == CodeTimeout:
			return fmt.Sprintf("%s stayed locked past the lock store's timeout, try again", key)
		}
		return fmt.Sprintf("cannot lock %s now, try again", key)
	})
}

// Stage places Lock among the claims.
func (m *lockMiddleware) Stage() Stage { return StageClaim }

// AfterDispatch releases the locks.
func (m *lockMiddleware) AfterDispatch(ctx context.Context, p *Pipeline) { m.end(ctx, p) }

// AfterFailure releases the locks.
func (m *lockMiddleware) AfterFailure(ctx context.Context, p *Pipeline) { m.end(ctx, p) }

// end stops the watches, releases the locks and cancels the handler's
// context.
func (m *lockMiddleware) end(ctx context.Context, p *Pipeline) {
	v, ok := p.Assigned(m.stateKey)
	if !ok {
		return
	}
	run := v.(*lockRun)
	for i := range run.watches {
		run.watches[i].node.Stop()
	}
	m.release(ctx, p.CommandUUID, run.locks)
	run.cancel(nil)
}

// release gives the locks of command commandID up, the last taken first,
// logging failures: a lock lost before its release at Error, any other
// failure at Warn.
func (m *lockMiddleware) release(ctx context.Context, commandID string, locks []lockstore.Lock) {
	for _, l := range slices.Backward(locks) {
		err := l.Release(ctx)
		if err == nil {
			continue
		}
		level, msg := slog.LevelWarn, "lock release failed"
		if errors.Is(err, lockstore.ErrLockLost) {
			level, msg = slog.LevelError, "lock lost while the command ran"
		}
		m.logger.LogAttrs(ctx, level, msg,
			slog.String("command_id", commandID), slog.String("key", l.Key().String()), slog.Any("error", err))
	}
}
