package storm

import (
	"errors"
	"fmt"
	"io"
	"net/url"
	"strings"
	"time"
)

// The defaults of example_app storm's flags.
const (
	DefaultRequests    = 5000
	DefaultEmails      = 500
	DefaultConcurrency = 32
	DefaultTimeout     = 20 * time.Second
)

// Bounds of a storm, so that a typo cannot send one without end.
const (
	MaxRequests    = 1_000_000
	MaxConcurrency = 1024
	MaxTimeout     = 10 * time.Minute
)

// Progress says how Run shows its progress on Config.Stderr.
type Progress string

// The progress modes.
const (
	// ProgressAuto is ProgressBar when Config.Stderr is a terminal,
	// ProgressLines otherwise.
	ProgressAuto Progress = "auto"
	// ProgressBar draws a progress bar.
	ProgressBar Progress = "bar"
	// ProgressLines prints "storm: 1200/5000 requests, 812 req/s" every
	// second, and a last line at the end.
	ProgressLines Progress = "lines"
	// ProgressOff shows nothing.
	ProgressOff Progress = "off"
)

// Config is a storm. Its fields are the flags of example_app storm, and
// Validate names them so; the flags' defaults are the Default constants.
type Config struct {
	// Targets are the base URLs of the nodes, such as
	// http://127.0.0.1:8080: http or https, a host, no query; host:port
	// alone, such as 127.0.0.1:8080, is on http. The sign-ups
	// go to them in turn, and nowhere else. Required.
	Targets []string
	// Requests is how many POST /staff to send: 1 to MaxRequests.
	// Required.
	Requests int
	// Emails is how many distinct addresses they use: 1 to Requests.
	// Required.
	Emails int
	// Concurrency is how many requests are in flight at once: 1 to
	// MaxConcurrency. Required.
	Concurrency int
	// Timeout bounds each request, from connect to the end of the answer:
	// above 0, at most MaxTimeout. Required.
	Timeout time.Duration
	// Seed picks the addresses, their spellings and which request uses
	// which; 0 (the default) picks a seed at random. The report prints
	// the seed it used.
	Seed int64
	// Progress is how progress shows on Stderr; "" is ProgressOff.
	Progress Progress
	// Stderr receives the progress; nil is io.Discard.
	Stderr io.Writer

	// newTicker makes the progress ticker; nil is time.NewTicker. Tests
	// tick by hand.
	newTicker func(d time.Duration) (<-chan time.Time, func())
}

// Validate reports every problem of c at once.
func (c Config) Validate() error {
	var errs []error
	if len(c.Targets) == 0 {
		errs = append(errs, errors.New("-target is required: the base URL (or host:port) of each node, comma-separated, such as http://127.0.0.1:8080,127.0.0.1:8081"))
	}
	seen := map[string]bool{}
	for _, t := range c.Targets {
		base, err := parseTarget(t)
		if err != nil {
			errs = append(errs, fmt.Errorf("-target %q: %w", t, err))
			continue
		}
		if seen[base] {
			errs = append(errs, fmt.Errorf("-target %q is given twice", t))
		}
		seen[base] = true
	}
	if c.Requests < 1 || c.Requests > MaxRequests {
		errs = append(errs, fmt.Errorf("-requests %d: give 1 to %d", c.Requests, MaxRequests))
	}
	if c.Emails < 1 {
		errs = append(errs, fmt.Errorf("-emails %d: give at least 1", c.Emails))
	} else if c.Emails > c.Requests && c.Requests >= 1 {
		errs = append(errs, fmt.Errorf("-emails %d is more than -requests %d: every address is sent at least once, so give at most as many addresses as requests", c.Emails, c.Requests))
	}
	if c.Concurrency < 1 || c.Concurrency > MaxConcurrency {
		errs = append(errs, fmt.Errorf("-concurrency %d: give 1 to %d", c.Concurrency, MaxConcurrency))
	}
	if c.Timeout <= 0 || c.Timeout > MaxTimeout {
		errs = append(errs, fmt.Errorf("-timeout %v: give a duration above 0 and at most %v, such as 20s", c.Timeout, MaxTimeout))
	}
	switch c.Progress {
	case "", ProgressAuto, ProgressBar, ProgressLines, ProgressOff:
	default:
		errs = append(errs, fmt.Errorf("-progress %q: want auto, bar, lines or off", c.Progress))
	}
	return errors.Join(errs...)
}

// targetForm is the form of a target, for the errors of parseTarget.
const targetForm = "want host:port, or an http:// or https:// URL, such as 127.0.0.1:8080 or http://127.0.0.1:8080"

// parseTarget checks a target and returns its base URL, without a
// trailing slash. A target without a scheme, such as 127.0.0.1:8080 (the
// address serve listens on), is on http.
func parseTarget(s string) (string, error) {
	s = strings.TrimSpace(s)
	if !strings.Contains(s, "://") {
		s = "http://" + s
	}
	u, err := url.Parse(s)
	var uerr *url.Error
	switch {
	case errors.As(err, &uerr):
		return "", fmt.Errorf("%s: %w", targetForm, uerr.Err)
	case err != nil:
		return "", fmt.Errorf("%s: %w", targetForm, err)
	case u.Scheme != "http" && u.Scheme != "https":
		return "", errors.New(targetForm)
	case u.Host == "" || u.Hostname() == "":
		return "", errors.New("the URL has no host")
	case u.User != nil:
		return "", errors.New("the URL has a user name: give none")
	case u.RawQuery != "" || u.ForceQuery || u.Fragment != "":
		return "", errors.New("give the base URL of the node, without a query or fragment")
	}
	return strings.TrimSuffix(u.String(), "/"), nil
}
