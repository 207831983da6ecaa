package uniqueness

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/claimbus/claimbus/middleware"
)

// BatchLookupFunc reports which of values are taken: taken[i] for
// values[i]. Like a LookupFunc, it must read the store the handler writes
// to with strong consistency; in SQL, one query such as
//
//	SELECT email FROM staff WHERE email = ANY($1)
type BatchLookupFunc func(ctx context.Context, values []string) (taken []bool, err error)

// BatchTimeout bounds each call of a BatchLookupFunc made by Batched. The
// call does not end when the claimant who started it goes away, since it
// answers others too; this bound keeps a hung database from holding it
// forever.
const BatchTimeout = 10 * time.Second

// Batched returns a LookupFunc that looks values up together: while one
// call of f runs, the lookups that arrive wait and then go to f in one
// call, so that a storm of claims costs a query per batch rather than per
// claim. An uncontended lookup calls f at once, with its value alone.
//
// It keeps the claim's guarantee: every value is looked up by a call of f
// that starts after its lookup began, while its claimant holds the key.
//
// The lookup that finds no call running makes the call itself and waits
// for it (bounded by BatchTimeout, not by its ctx, since the call answers
// others too). The others wait for their batch's call, or for their ctx
// to end. The calls for lookups that arrived while another ran are made
// one at a time, each on a goroutine that ends with the call.
func Batched(f BatchLookupFunc) LookupFunc {
	b := &batcher{f: f}
	return b.lookup
}

// batcher coalesces lookups into calls of f, one call at a time.
type batcher struct {
	f BatchLookupFunc

	mu   sync.Mutex
	busy bool   // a call of f runs
	next *batch // the lookups waiting for the next call
}

// batch is the values of one call of f and, once done is closed, its
// answer.
type batch struct {
	ctx    context.Context
	values []string
	taken  []bool
	err    error
	done   chan struct{}
}

func (b *batcher) lookup(ctx context.Context, value string) (bool, error) {
	b.mu.Lock()
	bt := b.next
	if bt == nil {
		bt = &batch{ctx: ctx, done: make(chan struct{})}
		b.next = bt
	}
	i := len(bt.values)
	bt.values = append(bt.values, value)
	lead := !b.busy
	if lead {
		b.busy, b.next = true, nil
	}
	b.mu.Unlock()

	if lead {
		b.run(bt)
	} else {
		select {
		case <-bt.done:
		case <-ctx.Done():
			return false, ctx.Err()
		}
	}
	if bt.err != nil {
		return false, bt.err
	}
	return bt.taken[i], nil
}

// run calls f for bt, answers its lookups, then starts the call for the
// lookups that arrived meanwhile, if any, on a goroutine of its own.
func (b *batcher) run(bt *batch) {
	bt.taken, bt.err = b.call(bt)
	close(bt.done)

	b.mu.Lock()
	next := b.next
	b.next = nil
	b.busy = next != nil
	b.mu.Unlock()
	if next != nil {
		go b.run(next)
	}
}

// call calls f for bt's values, with a context that the first claimant
// going away does not cancel, turning a panic into an error.
func (b *batcher) call(bt *batch) (taken []bool, err error) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(bt.ctx), BatchTimeout)
	defer cancel()
	if perr := middleware.Recover("batch lookup", func() { taken, err = b.f(ctx, bt.values) }); perr != nil {
		return nil, perr
	}
	if err == nil && len(taken) != len(bt.values) {
		err = fmt.Errorf("uniqueness: batch lookup of %d values answered %d", len(bt.values), len(taken))
	}
	return taken, err
}
