package idempotency

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/claimbus/claimbus/claimstore"
	"github.com/claimbus/claimbus/internal/afterlost"
	"github.com/claimbus/claimbus/internal/observe"
	"github.com/claimbus/claimbus/lockstore"
	"github.com/claimbus/claimbus/middleware"
)

// assignRun is the key under which BeforeDispatch keeps, in the
// pipeline's Assigns, the state of a first run (its key and lock) for the
// after hooks.
const assignRun = "idempotency.run"

// Middleware is the idempotency middleware: it runs each command carrying
// an idempotency key once, and answers every repeat with the stored
// outcome of the first run (see idempotency/README.md). It is safe for
// concurrent use.
type Middleware struct {
	locker      lockstore.Locker
	store       claimstore.Outcomes
	retention   time.Duration
	key         KeyFunc
	namespace   string
	fingerprint FingerprintFunc
	timeout     time.Duration
	batch       int
	readFirst   bool
	logger      *slog.Logger

	namespaces sync.Map // command name → record namespace
}

var _ middleware.Middleware = (*Middleware)(nil)

// New returns the idempotency middleware configured by cfg.
func New(cfg Config) (*Middleware, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	key, fingerprint := cfg.Key, cfg.Fingerprint
	if key == nil {
		key = CommandUUID
	}
	if fingerprint == nil {
		fingerprint = SHA256JSON
	}
	return &Middleware{
		locker:      cfg.Locker,
		store:       cfg.Store,
		retention:   cfg.Retention,
		key:         key,
		namespace:   cmp.Or(cfg.Namespace, DefaultNamespace),
		fingerprint: fingerprint,
		timeout:     cmp.Or(cfg.LockTimeout, defaultLockTimeout),
		batch:       cmp.Or(cfg.PurgeBatch, defaultPurgeBatch),
		readFirst:   cfg.ReadFirst,
		logger:      cmp.Or(cfg.Logger, slog.Default()),
	}, nil
}

// run is a first run of a key: what the after hooks store and release.
type run struct {
	key    lockstore.Key
	lock   lockstore.Lock
	fp     []byte
	cancel context.CancelCauseFunc
	// watch cancels the handler's context when the lock is lost (see
	// lockstore.AfterLost); the after hooks stop it.
	watch afterlost.Node
}

// lockKey returns the key under which the lock and the outcome of the command
// p carries are kept, and whether it has one (Config.Key returned a
// non-empty key). The key may be invalid (too long): BeforeDispatch
// rejects such a command.
func (m *Middleware) lockKey(p *middleware.Pipeline) (lockstore.Key, bool) {
	id := m.key(p)
	if id == "" {
		return lockstore.Key{}, false
	}
	return lockstore.Key{Namespace: m.namespaceOf(p), ID: id}, true
}

// namespaceOf returns the record namespace of p's command type.
func (m *Middleware) namespaceOf(p *middleware.Pipeline) string {
	name := p.CommandName
	if name == "" {
		name = fmt.Sprintf("%T", p.Command)
	}
	if ns, ok := m.namespaces.Load(name); ok {
		return ns.(string)
	}
	ns := m.namespace + "." + name
	m.namespaces.Store(name, ns)
	return ns
}

// Stage places the middleware before every claim, so that a repeat gets
// its first run's answer, not the refusal of the claim that run holds.
func (m *Middleware) Stage() middleware.Stage { return middleware.StageAnswer }

// BeforeDispatch takes the lock on the command's idempotency key, waiting
// while a run of the same key holds it (on any node sharing the Locker),
// then reads the key's stored outcome:
//   - none: the command runs, holding the lock until its after hooks have
//     stored its outcome; its handler's context is cancelled, with
//     lockstore.ErrLockLost as its cause, when the lock is lost while it runs;
//   - one for the same payload (fingerprint): the command halts with the
//     stored answer, releasing the lock: the stored rejection, or the
//     stored result as the response with a nil error (a json.RawMessage:
//     the bus sends it as the first run's result was sent, so
//     bus.Dispatch decodes both alike; a caller of a bare Runner gets the
//     raw JSON);
//   - one for another payload: it halts with a rejection matching
//     middleware.ErrIdempotencyConflict.
//
// With Config.ReadFirst it reads the outcome first, and takes the lock only
// when there is none.
//
// It also halts with a rejection matching middleware.ErrInvalid when the
// key is too long or the command cannot be fingerprinted, ErrTimeout when
// the wait took longer than Config.LockTimeout, ErrUnavailable when the
// Locker or the Store failed (the cause is wrapped beside it, and left out
// of the message, which crosses the wire), and with ctx's error when ctx
// ended. A command without a key passes through.
func (m *Middleware) BeforeDispatch(ctx context.Context, p *middleware.Pipeline) {
	key, ok := m.lockKey(p)
	if !ok {
		return
	}
	if err := key.Validate(); err != nil {
		p.Halt(invalidKey(err))
		return
	}
	fp, err := m.fingerprintOf(p.Command)
	if err != nil {
		p.Halt(fmt.Errorf("%w: %w", middleware.Reject(middleware.CodeInvalid, "",
			"the command cannot be fingerprinted for its idempotency key"), err))
		return
	}
	_, end := observe.StartStep(p.Context(), observe.StepIdempotency, p.CommandName)
	m.begin(ctx, p, key, fp)
	end(p.Err())
}

// begin reads key's outcome under its lock, and either answers p with it
// or lets p run, holding the lock.
func (m *Middleware) begin(ctx context.Context, p *middleware.Pipeline, key lockstore.Key, fp []byte) {
	if m.readFirst && m.answered(ctx, p, key, fp) {
		return
	}
	lk, err := m.lock(ctx, key)
	if err != nil {
		m.haltLock(ctx, p, err)
		return
	}
	o, found, err := m.store.Outcome(ctx, key)
	if err != nil || found {
		m.release(ctx, p.CommandUUID, lk, true)
		switch {
		case err == nil:
			Answer(p, o, fp)
		case ctx.Err() != nil:
			p.Halt(fmt.Errorf("idempotency: outcome of key %s: %w", key, err))
		default:
			p.Halt(middleware.RejectStoreError(err, "", func(string) string { return "cannot tell whether this command already ran now, try again" }))
		}
		return
	}
	hctx, cancel := context.WithCancelCause(p.Context())
	p.SetContext(hctx)
	r := &run{key: key, lock: lk, fp: fp, cancel: cancel}
	afterlost.Watch(lk, &r.watch, r)
	p.Assign(assignRun, r)
}

// answered reads key's outcome before the lock (Config.ReadFirst) and,
// when there is one, halts the command with it and reports true. A failed
// read is left to the read under the lock.
func (m *Middleware) answered(ctx context.Context, p *middleware.Pipeline, key lockstore.Key, fp []byte) bool {
	o, found, err := m.store.Outcome(ctx, key)
	if err != nil || !found {
		return false
	}
	Answer(p, o, fp)
	return true
}

// fingerprintOf calls the fingerprint function, which is user code: its
// panic is an error.
func (m *Middleware) fingerprintOf(cmd any) (fp []byte, err error) {
	if perr := middleware.Recover("idempotency fingerprint", func() { fp, err = m.fingerprint(cmd) }); perr != nil {
		return nil, perr
	}
	return fp, err
}

// lock takes key now, or waits for it up to the lock timeout.
func (m *Middleware) lock(ctx context.Context, key lockstore.Key) (lockstore.Lock, error) {
	lk, err := m.locker.TryLock(ctx, key)
	if !errors.Is(err, lockstore.ErrLocked) {
		return lk, err
	}
	wctx, cancel := context.WithTimeout(ctx, m.timeout)
	defer cancel()
	return m.locker.Lock(wctx, key)
}

// haltLock stops the command whose lock failed with err.
func (m *Middleware) haltLock(ctx context.Context, p *middleware.Pipeline, err error) {
	switch {
	case ctx.Err() != nil:
		p.Halt(fmt.Errorf("idempotency: lock on the idempotency key: %w", err))
	default:
		p.Halt(middleware.RejectStoreError(err, "", func(code string) string {
			switch code {
			case middleware.CodeTimeout:
				return fmt.Sprintf("waited more than %v for the run of this idempotency key ahead of this one, try again", m.timeout)
			case middleware.CodeInvalid:
				return invalidKeyMessage
			case middleware.CodeLocked:
				return "the run of this idempotency key ahead of this one holds it, try again"
			}
			return "cannot take the idempotency key now, try again"
		}))
	}
}

// invalidKey is the halt reason of a command whose key the Locker cannot
// take (err says why).
func invalidKey(err error) error {
	return middleware.RejectStoreError(err, "", func(string) string { return invalidKeyMessage })
}

// invalidKeyMessage is the message of the rejection of a key the Locker
// cannot take.
var invalidKeyMessage = fmt.Sprintf("the idempotency key cannot be used: longer than %d bytes (%d with the command name) or not UTF-8",
	lockstore.MaxIDLen, lockstore.MaxNamespaceLen)

// LockLost cancels the handler's context: the run's lock was lost.
func (r *run) LockLost() {
	r.cancel(fmt.Errorf("idempotency: lock on the idempotency key lost while the handler ran: %s: %w", r.key, lockstore.ErrLockLost))
}

// AfterDispatch stores the command's response as its key's outcome, then
// releases the key. Should a later after hook have failed the command (a
// panic), its error is what the sender gets, and it is not stored.
func (m *Middleware) AfterDispatch(ctx context.Context, p *middleware.Pipeline) { m.finish(ctx, p) }

// AfterFailure stores the command's outcome when it is a final answer (a
// command halted with a nil error by a later hook, or a rejection other
// than unavailable, timeout and locked), then releases the key. A
// transient failure (those rejections, a handler's plain error, a panic, a
// done context) is not stored: a retry runs again.
func (m *Middleware) AfterFailure(ctx context.Context, p *middleware.Pipeline) { m.finish(ctx, p) }

// finish ends the first run p carries, if any: it stops the lost-lock
// watch, stores the outcome when it is final (the answer the sender gets),
// and releases the lock.
func (m *Middleware) finish(ctx context.Context, p *middleware.Pipeline) {
	v, _ := p.Assigned(assignRun)
	r, ok := v.(*run)
	if !ok {
		return
	}
	r.watch.Stop()
	lost := false
	select {
	case <-r.lock.Lost():
		lost = true
	default:
	}
	if o, ok := m.outcome(ctx, p, r); ok && lost {
		// Another run may hold the key now, and store its own answer: this
		// one must not replace it.
		m.logger.LogAttrs(ctx, slog.LevelError, "idempotency outcome not stored: the key's lock was lost while the command ran",
			slog.String("command_id", p.CommandUUID), slog.String("key", r.key.String()))
	} else if ok {
		if err := m.store.SaveOutcome(ctx, r.key, o, m.retention); err != nil {
			m.logger.LogAttrs(ctx, slog.LevelError, "idempotency outcome not stored: a repeat will run again",
				slog.String("command_id", p.CommandUUID), slog.String("key", r.key.String()), slog.Any("error", err))
		}
	}
	m.release(ctx, p.CommandUUID, r.lock, false)
	r.cancel(context.Canceled)
}

// outcome returns the outcome to store for the run r of p, and whether it
// is final.
func (m *Middleware) outcome(ctx context.Context, p *middleware.Pipeline, r *run) (claimstore.Outcome, bool) {
	o, final, err := OutcomeOf(p, r.fp)
	if err != nil {
		m.logger.LogAttrs(ctx, slog.LevelWarn, "idempotency outcome not stored: the result cannot be encoded",
			slog.String("command_id", p.CommandUUID), slog.String("key", r.key.String()), slog.Any("error", err))
	}
	return o, final
}

// release releases lk, logging a failure. detach gives the release a
// context of its own, bounded by middleware.DefaultReleaseTimeout, for
// when ctx may be done.
func (m *Middleware) release(ctx context.Context, commandID string, lk lockstore.Lock, detach bool) {
	if detach {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(context.WithoutCancel(ctx), middleware.DefaultReleaseTimeout)
		defer cancel()
	}
	if err := lk.Release(ctx); err != nil {
		level, msg := slog.LevelWarn, "idempotency lock release failed"
		if errors.Is(err, lockstore.ErrLockLost) {
			level, msg = slog.LevelError, "idempotency lock lost while the command ran: a repeat may have run meanwhile"
		}
		m.logger.LogAttrs(ctx, level, msg,
			slog.String("command_id", commandID), slog.String("key", lk.Key().String()), slog.Any("error", err))
	}
}
