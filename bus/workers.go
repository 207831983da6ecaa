package bus

import (
	"context"
	"sync"

	"github.com/ThreeDotsLabs/watermill/message"
)

// workers runs jobs on at most max goroutines, started on demand and kept
// until stop: a goroutine that handled a command keeps its grown stack for
// the next one, where a fresh goroutine per command would grow (copy) its
// stack each time.
type workers struct {
	jobs chan job
	stop chan struct{}
	wg   sync.WaitGroup
	do   func(job) // runs one job

	mu  sync.Mutex
	n   int
	max int
}

// job is one command for a worker, handed over by value: neither a Dispatch
// in process nor a subscription's message allocates a closure or a struct
// per command for it.
type job struct {
	msg    *message.Message
	local  bool            // sent in process; else from a subscription
	sender context.Context // in process: the waiting Dispatch's ctx, or nil
	waiter string          // in process: the command id its Dispatch waits under; "" for Send
}

func newWorkers(max int, do func(job)) *workers {
	return &workers{jobs: make(chan job), stop: make(chan struct{}), max: max, do: do}
}

// submit runs f on an idle worker, or a new one while there are fewer than
// max, or else waits for a worker until cancel is closed; it reports
// whether f was handed over.
func (w *workers) submit(f job, cancel <-chan struct{}) bool {
	select {
	case w.jobs <- f:
		return true
	default:
	}
	w.mu.Lock()
	if w.n < w.max {
		w.n++
		w.wg.Add(1)
		w.mu.Unlock()
		go w.run(f, true)
		return true
	}
	w.mu.Unlock()
	select {
	case w.jobs <- f:
		return true
	case <-cancel:
		return false
	}
}

// run runs f, when has is set, then the jobs it is given until stop.
func (w *workers) run(f job, has bool) {
	stopped := false
	defer func() {
		if !stopped {
			// f ended the goroutine (runtime.Goexit): a fresh worker takes
			// its place, so that a submit waiting for a worker is served.
			w.wg.Add(1)
			go w.run(job{}, false)
		}
		w.wg.Done()
	}()
	for {
		if has {
			w.do(f)
		}
		has = true
		select {
		case f = <-w.jobs:
		case <-w.stop:
			stopped = true
			return
		}
	}
}

// close stops the workers once they are idle, and waits for them. No job
// may be submitted after close begins.
func (w *workers) close() {
	close(w.stop)
	w.wg.Wait()
}
