package bus

import (
	"context"
	"fmt"
	"reflect"
	"slices"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/claimbus/claimbus/middleware"
)

// Lifecycle states of a Bus.
const (
	stateNew = iota
	stateRunning
	stateClosed
)

// Bus dispatches commands to their handlers through Watermill and carries
// their outcome back. Register handlers with Handle, then Start (or Run);
// Dispatch and Send work while the bus runs; Close stops it. A Bus is safe
// for concurrent use.
type Bus struct {
	cfg        Config
	runner     *middleware.Runner
	local      bool // no Publisher: commands are handled in process
	replyTopic string
	logger     watermill.LoggerAdapter

	// mu guards state, handlers and the starting of goroutines counted by
	// inflight, so that Close never waits while one is being added.
	mu       sync.RWMutex
	state    int
	handlers map[string]*entry    // by command name
	registry *middleware.Registry // the handlers' command types, by name

	workers  *workers       // HandlerConcurrency goroutines that run handlers
	inflight sync.WaitGroup // commands handed to workers and not done
	loops    sync.WaitGroup // topic loops of command subscriptions

	runCtx     context.Context // the context handlers run in
	cancelRuns context.CancelFunc
	stopLoops  chan struct{}      // closed by Close: command loops stop reading
	cancelSubs context.CancelFunc // ends the command subscriptions
	replyLoop  sync.WaitGroup
	cancelRepl context.CancelFunc // ends the reply subscription
	stopLoss   func()             // unregisters from a LossNotifier; nil if none

	closed chan struct{} // closed when Close has finished

	waiters waiters
	topics  sync.Map // command name → topic
}

// New returns a bus for cfg. It fails, with every problem of cfg joined
// with errors.Join, when cfg is not valid.
func New(cfg Config) (*Bus, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	runner, err := middleware.NewRunner(middleware.RunnerConfig{
		Middleware:     append(slices.Clip(cfg.Middleware), senderGone{}),
		ReleaseTimeout: cfg.ReleaseTimeout,
		FailureLog:     cfg.FailureLog,
	})
	if err != nil {
		return nil, err
	}
	b := &Bus{
		cfg:        cfg,
		runner:     runner,
		local:      cfg.Publisher == nil,
		replyTopic: cfg.ReplyTopic(cfg.NodeID),
		logger:     cfg.Logger.With(watermill.LogFields{"bus_node": cfg.NodeID}),
		handlers:   make(map[string]*entry),
		registry:   middleware.NewRegistry(cfg.Marshaler),
		stopLoops:  make(chan struct{}),
		closed:     make(chan struct{}),
	}
	b.waiters.m = make(map[string]chan reply)
	b.workers = newWorkers(cfg.HandlerConcurrency, b.runJob)
	b.runCtx, b.cancelRuns = context.WithCancel(context.Background())
	return b, nil
}

// CommandName returns the name cmd travels under, which selects its
// handler and its topic.
func (b *Bus) CommandName(cmd any) string { return b.cfg.Marshaler.Name(cmd) }

// Pending returns how many Dispatch calls wait for a reply.
func (b *Bus) Pending() int { return b.waiters.len() }

// Start subscribes to the topic of every registered command and to this
// bus's reply topic, and starts handling commands. ctx bounds the
// subscribing only. It fails, starting nothing, with an error matching
// middleware.ErrUnhandledCommandType when a middleware of Config.Middleware
// acts on a command type (see middleware.CommandTyper, such as a
// uniqueness rule's) that no handler registered with Handle takes. Handle fails after Start; Dispatch and Send fail
// before it with ErrNotStarted.
func (b *Bus) Start(ctx context.Context) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	switch b.state {
	case stateRunning:
		return ErrStarted
	case stateClosed:
		return ErrClosed
	}
	if err := b.checkCommandTypes(); err != nil {
		return err
	}
	if b.local {
		b.state = stateRunning
		return nil
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("bus: start: %w", err)
	}

	// The subscriptions live until Close, not until ctx ends.
	subCtx, cancelSubs := context.WithCancel(context.WithoutCancel(ctx))
	replCtx, cancelRepl := context.WithCancel(context.WithoutCancel(ctx))
	b.cancelSubs, b.cancelRepl = cancelSubs, cancelRepl

	replies, err := b.cfg.ReplySubscriber.Subscribe(replCtx, b.replyTopic)
	if err != nil {
		cancelSubs()
		cancelRepl()
		return fmt.Errorf("bus: subscribe to reply topic %q: %w", b.replyTopic, err)
	}
	// One subscription per topic; commands sharing a topic share it.
	var subs []<-chan *message.Message
	seen := make(map[string]bool, len(b.handlers))
	for _, e := range b.handlers {
		if seen[e.topic] {
			continue
		}
		seen[e.topic] = true
		ch, err := b.cfg.Subscriber.Subscribe(subCtx, e.topic)
		if err != nil {
			cancelSubs()
			cancelRepl()
			return fmt.Errorf("bus: subscribe to %q for %s: %w", e.topic, e.name, err)
		}
		subs = append(subs, ch)
	}

	if ln, ok := b.cfg.ReplySubscriber.(LossNotifier); ok {
		b.stopLoss = ln.NotifyLoss(b.lost)
	}
	b.replyLoop.Add(1)
	go b.receiveReplies(replCtx, replies)
	for _, ch := range subs {
		b.loops.Add(1)
		go b.receiveCommands(ch)
	}
	b.state = stateRunning
	return nil
}

// checkCommandTypes reports each command type a middleware acts on that no
// handler takes. The caller holds b.mu.
func (b *Bus) checkCommandTypes() error {
	types := make([]reflect.Type, 0, len(b.handlers))
	for _, name := range b.registry.Names() {
		cmd, _ := b.registry.New(name)
		types = append(types, reflect.TypeOf(cmd))
	}
	if err := middleware.CheckCommandTypes(b.cfg.Middleware, types); err != nil {
		return fmt.Errorf("bus: start: register a handler with Handle before Start for every command type the middleware acts on: %w", err)
	}
	return nil
}

// Close stops the bus and waits for every goroutine it started. In order:
// Dispatch and Send fail with ErrClosed from now on; command subscriptions
// stop taking messages; running handlers finish, reply and ack (after
// CloseTimeout their context is cancelled, and Close waits for them to
// return); the subscriptions end; a Dispatch still waiting gets ErrClosed.
// Close is idempotent, and a Close that finds another one under way waits
// for it; it does not close the Publisher and Subscriber the bus was given.
// Do not call it from a handler or a hook: it waits for them to return.
func (b *Bus) Close() error {
	b.mu.Lock()
	if b.state == stateClosed {
		b.mu.Unlock()
		<-b.closed
		return nil
	}
	wasRunning := b.state == stateRunning
	b.state = stateClosed
	b.mu.Unlock()

	if wasRunning {
		if b.stopLoss != nil {
			b.stopLoss()
		}
		close(b.stopLoops)
		b.loops.Wait()
		b.waitInflight()
		if b.cancelSubs != nil {
			b.cancelSubs()
			b.cancelRepl()
			b.replyLoop.Wait()
		}
	}
	b.workers.close()
	b.cancelRuns()
	b.waiters.failAll(ErrClosed)
	close(b.closed)
	return nil
}

// waitInflight waits for running handlers, cancelling their context after
// CloseTimeout.
func (b *Bus) waitInflight() {
	done := make(chan struct{})
	go func() {
		b.inflight.Wait()
		close(done)
	}()
	t := time.NewTimer(b.cfg.CloseTimeout)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
		b.logger.Info("Close timeout: cancelling running handlers", nil)
		b.cancelRuns()
		<-done
	}
}

// begin counts one handler run that is about to start, unless the bus is
// not running.
func (b *Bus) begin() error {
	b.mu.RLock()
	defer b.mu.RUnlock()
	if err := b.stateErr(); err != nil {
		return err
	}
	b.inflight.Add(1)
	return nil
}

// errState reports why commands cannot be sent now, if so.
func (b *Bus) errState() error {
	b.mu.RLock()
	defer b.mu.RUnlock()
	return b.stateErr()
}

// stateErr is errState for a caller holding b.mu.
func (b *Bus) stateErr() error {
	switch b.state {
	case stateNew:
		return ErrNotStarted
	case stateClosed:
		return ErrClosed
	}
	return nil
}
