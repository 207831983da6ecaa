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
		fmt.Fprint(stderr, "usage: example_app storm -target URL[,URL...] [flags]\n\n"+
			"Sends POST /staff sign-ups to the nodes, few emails in random letter case, then checks\n"+
			"that no email was created twice and no unique index fired. Exit 0: OK; 1: a guarantee\n"+
			"broke, a 5xx, or the storm could not finish; 2: bad flags.\n\n")
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
	progress := fs.String("progress", string(storm.ProgressAuto), "auto (a bar on a terminal, lines otherwise), bar, lines (one a second on stderr) or off")
	if ok, code := parseFlags(fs, args, stderr); !ok {
		return code
	}
	cfg.Progress = storm.Progress(*progress)
	err := cfg.Validate()
	if fs.NArg() > 0 {
		err = errors.Join(err, fmt.Errorf("unexpected arguments %q", fs.Args()))
	}
	if err != nil {
		fmt.Fprintf(stderr, "example_app storm: bad flags:\n%v\n", err)
		return 2
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
