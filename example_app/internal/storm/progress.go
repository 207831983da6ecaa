package storm

import (
	"fmt"
	"io"
	"os"
	"time"

	"github.com/schollz/progressbar/v3"
	"golang.org/x/term"
)

// How often each kind of progress shows.
const (
	linesEvery = time.Second
	barEvery   = 200 * time.Millisecond
)

// shower shows the progress of a storm of total requests.
type shower interface {
	// update shows that done requests are done at now.
	update(done int, now time.Time)
	// finish shows the end: all done, or interrupted.
	finish(done int, now time.Time, interrupted bool)
}

// resolve turns ProgressAuto into ProgressBar or ProgressLines, by whether
// w is a terminal, and "" into ProgressOff.
func (p Progress) resolve(w io.Writer) Progress {
	switch p {
	case "":
		return ProgressOff
	case ProgressAuto:
		if f, ok := w.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
			return ProgressBar
		}
		return ProgressLines
	}
	return p
}

// startProgress shows the progress of a storm of total requests on w, as
// cfg.Progress says, reading done on every tick of its own goroutine. The
// function it returns stops that goroutine, waits for it, and shows the
// end.
func startProgress(cfg Config, w io.Writer, total int, done func() int) (stop func(interrupted bool)) {
	var s shower
	every := linesEvery
	start := time.Now()
	switch cfg.Progress.resolve(w) {
	case ProgressBar:
		s, every = newBar(w, total), barEvery
	case ProgressLines:
		s = &lines{w: w, total: total, start: start, last: start}
	default:
		return func(bool) {}
	}
	newTicker := cfg.newTicker
	if newTicker == nil {
		newTicker = func(d time.Duration) (<-chan time.Time, func()) {
			t := time.NewTicker(d)
			return t.C, t.Stop
		}
	}
	tick, stopTicker := newTicker(every)
	quit, exited := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(exited)
		for {
			select {
			case now := <-tick:
				s.update(done(), now)
			case <-quit:
				return
			}
		}
	}()
	return func(interrupted bool) {
		close(quit)
		<-exited
		stopTicker()
		s.finish(done(), time.Now(), interrupted)
	}
}

// lines prints a line per tick: "storm: 1200/5000 requests, 812 req/s",
// the rate since the line before.
type lines struct {
	w           io.Writer
	total       int
	start, last time.Time
	lastDone    int
}

func (l *lines) update(done int, now time.Time) {
	rate := 0.0
	if d := now.Sub(l.last); d > 0 {
		rate = float64(done-l.lastDone) / d.Seconds()
	}
	fmt.Fprintf(l.w, "storm: %d/%d requests, %.0f req/s\n", done, l.total, rate)
	l.last, l.lastDone = now, done
}

func (l *lines) finish(done int, now time.Time, interrupted bool) {
	took := now.Sub(l.start).Round(time.Millisecond)
	if interrupted {
		fmt.Fprintf(l.w, "storm: %d/%d requests, interrupted after %v\n", done, l.total, took)
		return
	}
	rate := 0.0
	if took > 0 {
		rate = float64(done) / took.Seconds()
	}
	fmt.Fprintf(l.w, "storm: %d/%d requests, done in %v, %.0f req/s\n", done, l.total, took, rate)
}

// bar draws a progress bar.
type bar struct{ b *progressbar.ProgressBar }

func newBar(w io.Writer, total int) *bar {
	return &bar{b: progressbar.NewOptions(total,
		progressbar.OptionSetWriter(w),
		progressbar.OptionSetDescription("storm"),
		progressbar.OptionSetWidth(30),
		progressbar.OptionShowCount(),
		progressbar.OptionShowIts(),
		progressbar.OptionSetItsString("req"),
		progressbar.OptionSetRenderBlankState(true),
		progressbar.OptionOnCompletion(func() { fmt.Fprintln(w) }),
	)}
}

func (b *bar) update(done int, _ time.Time) { _ = b.b.Set(done) }

func (b *bar) finish(done int, _ time.Time, interrupted bool) {
	if interrupted || done < b.b.GetMax() {
		_ = b.b.Set(done)
		_ = b.b.Exit()
		return
	}
	_ = b.b.Finish()
}
