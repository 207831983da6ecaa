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

	// The defaults of the open loop's flags.
	DefaultDuration    = 20 * time.Second
	DefaultDup         = 0.9
	DefaultMaxInFlight = 4096
	DefaultP99         = time.Second
	DefaultRateStep    = 1.25
)

// Bounds of a storm, so that a typo cannot send one without end.
const (
	MaxRequests    = 1_000_000
	MaxConcurrency = 1024
	MaxTimeout     = 10 * time.Minute
	MaxRate        = 100_000
	MaxDuration    = 10 * time.Minute
	MaxInFlight    = 16_384
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
//
// A storm is a closed loop when Rate is 0: Concurrency requests in
// flight, each sent when one is answered, Requests in all over Emails
// addresses. With a Rate it is an open loop: requests start on a fixed
// schedule, Rate a second for Duration, whatever the answers' latency;
// Requests and Emails follow from Rate, Duration and Dup, and Concurrency
// is unused.
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

	// Rate, when above 0, makes the storm an open loop of Rate requests
	// a second (at most MaxRate), and with FindRate the rate of its
	// first step.
	Rate float64
	// Duration is how long an open loop lasts, or each step of FindRate:
	// above 0, at most MaxDuration. Required with Rate.
	Duration time.Duration
	// Dup is the share of an open loop's requests whose address an
	// earlier one used: 0 to below 1. Every address is sent at least
	// once, so there are about (1-Dup) × the requests of them.
	Dup float64
	// MaxInFlight caps an open loop's requests in flight: one that is
	// due while MaxInFlight are in flight is not sent, and counted as
	// dropped. 1 to MaxInFlight. Required with Rate.
	MaxInFlight int
	// FindRate makes the open loop a search: steps of Duration at Rate,
	// then at RateStep times the rate before, until a step's p99 is above
	// P99 or fewer than 99% of its requests are answered (with a status
	// other than 5xx). Run it with Search.
	FindRate bool
	// P99 is the bound of FindRate: above 0. RateStep is the factor from
	// one step's rate to the next: above 1, at most 10.
	P99      time.Duration
	RateStep float64

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
	if c.open() {
		errs = append(errs, c.validateOpen()...)
	} else {
		errs = append(errs, c.validateClosed()...)
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

// open says that the storm is an open loop.
func (c Config) open() bool { return c.Rate != 0 || c.FindRate }

// validateClosed checks the fields of a closed loop.
func (c Config) validateClosed() []error {
	var errs []error
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
	return errs
}

// validateOpen checks the fields of an open loop.
func (c Config) validateOpen() []error {
	var errs []error
	if !(c.Rate > 0 && c.Rate <= MaxRate) {
		errs = append(errs, fmt.Errorf("-rate %v: give a rate above 0 and at most %d requests a second", c.Rate, MaxRate))
	}
	if c.Duration <= 0 || c.Duration > MaxDuration {
		errs = append(errs, fmt.Errorf("-duration %v: give a duration above 0 and at most %v, such as 20s", c.Duration, MaxDuration))
	} else if n := c.Rate * c.Duration.Seconds(); n > MaxRequests {
		errs = append(errs, fmt.Errorf("-rate %v for -duration %v is %.0f requests: give at most %d", c.Rate, c.Duration, n, MaxRequests))
	}
	if !(c.Dup >= 0 && c.Dup < 1) {
		errs = append(errs, fmt.Errorf("-dup %v: give a share from 0 to below 1, such as 0.9", c.Dup))
	}
	if c.MaxInFlight < 1 || c.MaxInFlight > MaxInFlight {
		errs = append(errs, fmt.Errorf("-max-in-flight %d: give 1 to %d", c.MaxInFlight, MaxInFlight))
	}
	if c.FindRate && c.P99 <= 0 {
		errs = append(errs, fmt.Errorf("-p99 %v: give a bound above 0, such as 1s", c.P99))
	}
	if c.FindRate && !(c.RateStep > 1 && c.RateStep <= 10) {
		errs = append(errs, fmt.Errorf("-rate-step %v: give a factor above 1 and at most 10, such as 1.25", c.RateStep))
	}
	return errs
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
