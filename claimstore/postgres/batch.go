package postgres

import (
	"context"
	"sync"
	"sync/atomic"
)

// batcher coalesces calls into runs of one function over many requests, at
// most lanes runs at a time: while lanes runs go, the calls that arrive
// queue up, and when one ends the first live caller of the next batch is
// elected to run that batch. There is no goroutine of its own: every run happens on a caller's
// goroutine. An uncontended call runs at once, alone, under its own ctx.
//
// Calls whose keys are equal never share a batch: a later one goes to a
// later batch, so a statement never touches a row twice and calls on one
// key are answered in the order they queued.
type batcher[Req, Res any] struct {
	// run answers reqs, one Res per request in order, or fails them all.
	run func(ctx context.Context, reqs []Req) ([]Res, error)
	// key names a request's row; nil when requests may share a batch
	// whatever their rows.
	key   func(Req) string
	max   int // the most requests in one batch
	lanes int // the most runs at once

	mu      sync.Mutex
	running int                // runs going (or callers elected to start one)
	pending []*batch[Req, Res] // the batches waiting, in order
}

type batch[Req, Res any] struct {
	calls   []*call[Req, Res]
	keys    map[string]struct{}
	started bool // elected: calls no longer changes
}

type call[Req, Res any] struct {
	ctx   context.Context
	req   Req
	batch *batch[Req, Res]
	res   Res
	err   error
	lead  chan struct{} // closed when this caller is elected to run its batch
	done  chan struct{} // closed when res and err are set
}

func newBatcher[Req, Res any](max, lanes int, key func(Req) string, run func(context.Context, []Req) ([]Res, error)) *batcher[Req, Res] {
	return &batcher[Req, Res]{run: run, key: key, max: max, lanes: lanes}
}

// do answers req, in a batch with whatever calls are queued beside it.
// When ctx ends before the call's batch is elected, the call leaves it and
// returns ctx's error: nothing of it is sent. When ctx ends after, the call
// returns ctx's error and its request may or may not take effect, unless
// the caller was elected to run the batch: then it runs it (the others
// wait for it) and returns its answer.
func (b *batcher[Req, Res]) do(ctx context.Context, req Req) (Res, error) {
	c := &call[Req, Res]{ctx: ctx, req: req}
	b.mu.Lock()
	if b.running < b.lanes {
		// Then nothing is pending: calls queue only while every lane runs.
		b.running++
		b.mu.Unlock()
		c.batch = &batch[Req, Res]{calls: []*call[Req, Res]{c}, started: true}
		b.execute(c.batch)
		return c.res, c.err
	}
	c.lead, c.done = make(chan struct{}), make(chan struct{})
	b.enqueue(c)
	b.mu.Unlock()

	select {
	case <-c.done:
		return c.res, c.err
	case <-c.lead:
		b.execute(c.batch)
		return c.res, c.err
	case <-ctx.Done():
	}
	b.mu.Lock()
	if !c.batch.started {
		b.leave(c)
		b.mu.Unlock()
		var zero Res
		return zero, ctx.Err()
	}
	b.mu.Unlock()
	select {
	case <-c.lead:
		// Elected before ctx ended was seen: the batch has no other runner.
		b.execute(c.batch)
		return c.res, c.err
	default:
		var zero Res
		return zero, ctx.Err()
	}
}

// enqueue puts c in the first pending batch with room and without its
// key. b.mu is held.
func (b *batcher[Req, Res]) enqueue(c *call[Req, Res]) {
	k := ""
	if b.key != nil {
		k = b.key(c.req)
	}
	for _, bt := range b.pending {
		if len(bt.calls) >= b.max {
			continue
		}
		if b.key != nil {
			if _, dup := bt.keys[k]; dup {
				continue
			}
			bt.keys[k] = struct{}{}
		}
		bt.calls = append(bt.calls, c)
		c.batch = bt
		return
	}
	bt := &batch[Req, Res]{calls: []*call[Req, Res]{c}}
	if b.key != nil {
		bt.keys = map[string]struct{}{k: {}}
	}
	b.pending = append(b.pending, bt)
	c.batch = bt
}

// leave takes c out of its batch, which has not started, and drops the
// batch when it is left empty. b.mu is held.
func (b *batcher[Req, Res]) leave(c *call[Req, Res]) {
	bt := c.batch
	for i, o := range bt.calls {
		if o == c {
			bt.calls = append(bt.calls[:i], bt.calls[i+1:]...)
			break
		}
	}
	if b.key != nil {
		delete(bt.keys, b.key(c.req))
	}
	if len(bt.calls) == 0 {
		for i, o := range b.pending {
			if o == bt {
				b.pending = append(b.pending[:i], b.pending[i+1:]...)
				break
			}
		}
	}
}

// execute runs bt, elects the runner of the next batch, then answers bt's
// calls.
func (b *batcher[Req, Res]) execute(bt *batch[Req, Res]) {
	reqs := make([]Req, len(bt.calls))
	for i, c := range bt.calls {
		reqs[i] = c.req
	}
	ctx, stop := anyAlive(bt.calls)
	res, err := b.run(ctx, reqs)
	stop()
	// The next batch starts before this one's callers are woken, so that
	// the lane never waits on their scheduling.
	b.handOff()
	for i, c := range bt.calls {
		if err != nil {
			c.err = err
		} else {
			c.res = res[i]
		}
		if c.done != nil {
			close(c.done)
		}
	}
}

// handOff gives the lane of a run that ended to the next pending batch,
// electing its first caller to run it, or frees the lane.
func (b *batcher[Req, Res]) handOff() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.pending) == 0 {
		b.running--
		return
	}
	next := b.pending[0]
	b.pending = b.pending[1:]
	next.started = true
	close(next.calls[0].lead)
}

// anyAlive returns a context that ends when the ctx of every call has
// ended (a batch goes on while any of its callers waits for it), with the
// values of the first. A lone call's is its own ctx.
func anyAlive[Req, Res any](calls []*call[Req, Res]) (context.Context, func()) {
	if len(calls) == 1 {
		return calls[0].ctx, func() {}
	}
	ctx, cancel := context.WithCancel(context.WithoutCancel(calls[0].ctx))
	var alive atomic.Int64
	alive.Store(int64(len(calls)))
	stops := make([]func() bool, len(calls))
	for i, c := range calls {
		stops[i] = context.AfterFunc(c.ctx, func() {
			if alive.Add(-1) == 0 {
				cancel()
			}
		})
	}
	return ctx, func() {
		for _, stop := range stops {
			stop()
		}
		cancel()
	}
}
