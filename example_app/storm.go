package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/claimbus/claimbus/example_app/internal/storm"
)

// stormCmd runs example_app storm: a storm of sign-ups across nodes, then
// a check of what they hold. It returns 0 when no guarantee broke, 1 when
// one did (or the storm could not run to its end), 2 for a usage error.
func stormCmd(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("example_app storm", flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprint(stderr, "usage: example_app storm -target URL[,URL...] [flags]\n"+
			"       example_app storm -target URL -rate N [-duration D] [flags]\n"+
			"       example_app storm -target URL -find-rate [-p99 D] [-rate N] [flags]\n\n"+
			"Sends POST /staff sign-ups to the nodes, few emails in random letter case, then checks\n"+
			"that no email was created twice and no unique index fired. Exit 0: OK; 1: a guarantee\n"+
			"broke, a 5xx, or the storm could not finish; 2: bad flags.\n\n"+
			"Closed loop (the default): -concurrency requests in flight, each sent when one is answered,\n"+
			"-requests in all: its req/s is what the answers let through, not a capacity.\n"+
			"Open loop (-rate): -rate requests a second start on schedule for -duration, whatever the\n"+
			"answers' latency (at most -max-in-flight at once, the rest dropped); -find-rate steps the\n"+
			"rate up, -rate-step times each step, until p99 > -p99 or fewer than 99% are answered,\n"+
			"twice at a rate.\n\n")
		fs.PrintDefaults()
	}
	cfg := storm.Config{Stderr: stderr}
	fs.Func("target", "base `URLs` of the nodes, such as http://127.0.0.1:8080 or 127.0.0.1:8080 (host:port is on http), comma-separated (or the flag repeated); the requests go to them in turn, and nowhere else (required)", func(s string) error {
		for t := range strings.SplitSeq(s, ",") {
			if t = strings.TrimSpace(t); t != "" {
				cfg.Targets = append(cfg.Targets, t)
			}
		}
		return nil
	})
	fs.IntVar(&cfg.Requests, "requests", storm.DefaultRequests, "how many POST /staff to send")
	fs.IntVar(&cfg.Emails, "emails", storm.DefaultEmails, "how many distinct emails they use, each at least once (at most -requests)")
	fs.IntVar(&cfg.Concurrency, "concurrency", storm.DefaultConcurrency, "how many requests are in flight at once")
	fs.DurationVar(&cfg.Timeout, "timeout", storm.DefaultTimeout, "bound on each request")
	fs.Int64Var(&cfg.Seed, "seed", 0, "seed of the emails, their spellings and their order, to repeat a run; 0 picks one (printed in the summary)")
	fs.Float64Var(&cfg.Rate, "rate", 0, "open loop: requests a second, started on schedule (with -find-rate the first step's; default 100 there)")
	fs.DurationVar(&cfg.Duration, "duration", storm.DefaultDuration, "open loop: how long it lasts, or each step of -find-rate")
	fs.Float64Var(&cfg.Dup, "dup", storm.DefaultDup, "open loop: the share of requests whose email an earlier one used (0 to below 1)")
	fs.IntVar(&cfg.MaxInFlight, "max-in-flight", storm.DefaultMaxInFlight, "open loop: a request due while this many are in flight is dropped, not sent")
	fs.BoolVar(&cfg.FindRate, "find-rate", false, "open loop: step the rate up until p99 > -p99 or fewer than 99% are answered (not 5xx) twice at a rate, and print the last rate within")
	fs.DurationVar(&cfg.P99, "p99", storm.DefaultP99, "-find-rate: the bound on p99")
	fs.Float64Var(&cfg.RateStep, "rate-step", storm.DefaultRateStep, "-find-rate: each step's rate over the one before's")
	progress := fs.String("progress", string(storm.ProgressAuto), "auto (a bar on a terminal, lines otherwise), bar, lines (one a second on stderr) or off")
	if ok, code := parseFlags(fs, args, stderr); !ok {
		return code
	}
	cfg.Progress = storm.Progress(*progress)
	err := modeFlags(fs, &cfg)
	err = errors.Join(err, cfg.Validate())
	if fs.NArg() > 0 {
		err = errors.Join(err, fmt.Errorf("unexpected arguments %q", fs.Args()))
	}
	if err != nil {
		fmt.Fprintf(stderr, "example_app storm: bad flags:\n%v\n", err)
		return 2
	}

	if cfg.FindRate {
		return searchCmd(ctx, cfg, stdout, stderr)
	}
	r, err := storm.Run(ctx, cfg)
	if r != nil {
		r.Write(stdout)
	}
	switch {
	case errors.Is(err, storm.ErrInterrupted) && r == nil:
		fmt.Fprintln(stderr, "example_app storm: interrupted before anything was sent")
		return 1
	case errors.Is(err, storm.ErrInterrupted):
		fmt.Fprintf(stderr, "example_app storm: interrupted with %d of %d requests done; the check did not run to its end\n", r.Sent()-r.Cancelled, r.Requests)
		return 1
	case err != nil:
		fmt.Fprintln(stderr, "example_app storm:", err)
		return 1
	case !r.OK():
		fmt.Fprintf(stderr, "example_app storm: FAILED: %s (listed above)\n", storm.Problems(len(r.Problems)))
		return 1
	}
	return 0
}

// The flags of one loop only.
var (
	closedFlags = []string{"requests", "emails", "concurrency"}
	openFlags   = []string{"duration", "dup", "max-in-flight"}
	searchFlags = []string{"p99", "rate-step"}
)

// modeFlags refuses the flags of the other loop, and sets what the loop
// of cfg does not use to zero: Requests, Emails and Concurrency in an
// open loop, its own fields in a closed one.
func modeFlags(fs *flag.FlagSet, cfg *storm.Config) error {
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	var errs []error
	refuse := func(names []string, why string) {
		for _, n := range names {
			if set[n] {
				errs = append(errs, fmt.Errorf("-%s is %s", n, why))
			}
		}
	}
	switch {
	case cfg.FindRate:
		refuse(closedFlags, "for the closed loop: -find-rate is an open loop")
		if !set["rate"] {
			cfg.Rate = 100
		}
	case set["rate"]:
		refuse(closedFlags, "for the closed loop: -rate is an open loop (give -duration and -dup)")
		refuse(searchFlags, "for -find-rate")
	default:
		refuse(openFlags, "for the open loop: give -rate or -find-rate")
		refuse(searchFlags, "for -find-rate")
		cfg.Duration, cfg.Dup, cfg.MaxInFlight, cfg.P99, cfg.RateStep = 0, 0, 0, 0, 0
		return errors.Join(errs...)
	}
	cfg.Requests, cfg.Emails, cfg.Concurrency = 0, 0, 0
	return errors.Join(errs...)
}

// searchCmd runs example_app storm -find-rate: 0 when the search ran to
// its end and broke no guarantee, whatever rate it found; 1 otherwise.
func searchCmd(ctx context.Context, cfg storm.Config, stdout, stderr io.Writer) int {
	s, err := storm.RunSearch(ctx, cfg)
	if s != nil {
		s.Write(stdout)
	}
	switch {
	case errors.Is(err, storm.ErrInterrupted):
		fmt.Fprintln(stderr, "example_app storm: interrupted; the search did not run to its end")
		return 1
	case err != nil:
		fmt.Fprintln(stderr, "example_app storm:", err)
		return 1
	case !s.OK():
		fmt.Fprintln(stderr, "example_app storm: FAILED: a step broke a guarantee (listed above)")
		return 1
	}
	return 0
}
