package bus

import "sync"

// workers runs jobs on at most max goroutines, started on demand and kept
// until stop: a goroutine that handled a command keeps its grown stack for
// the next one, where a fresh goroutine per command would grow (copy) its
// stack each time. Run that way, BenchmarkDispatch/impl=claimbus took
// 18-24 µs/op instead of about 9, and BenchmarkSend/impl=claimbus 14-18
// instead of about 7.4, one allocation more each.
type workers struct {
	jobs chan job
	stop chan struct{}
	wg   sync.WaitGroup

	mu  sync.Mutex
	n   int
	max int
}

// job is what a worker runs. A Dispatch in process hands its own struct
// (localJob) rather than closures over its values: one allocation where
// the closures took three (BenchmarkDispatch/impl=claimbus: 25 -> 23
// allocs/op).
type job interface{ run() }

// jobFunc is a func as a job.
type jobFunc func()

func (f jobFunc) run() { f() }

func newWorkers(max int) *workers {
	return &workers{jobs: make(chan job), stop: make(chan struct{}), max: max}
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
		go w.run(f)
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

func (w *workers) run(f job) {
	stopped := false
	defer func() {
		if !stopped {
			// f ended the goroutine (runtime.Goexit): a fresh worker takes
			// its place, so that a submit waiting for a worker is served.
			w.wg.Add(1)
			go w.run(nil)
		}
		w.wg.Done()
	}()
	for {
		if f != nil {
			f.run()
		}
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
