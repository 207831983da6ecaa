// Package storm is the load generator behind example_app storm: it sends
// many POST /staff sign-ups, a few distinct emails in random letter case,
// across the nodes of one example_app deployment, then checks what the
// nodes hold.
//
// # The storm
//
// A storm is a closed loop or an open loop. The closed loop (Config.Rate
// 0) sends Config.Requests sign-ups, Config.Concurrency at a time, to the
// targets in turn, each when one before it is answered: its req/s is the
// rate the answers let through, not a capacity. The open loop (Config.Rate
// above 0) starts Config.Rate sign-ups a second on a fixed schedule for
// Config.Duration, whatever the answers' latency, as users arrive; a
// sign-up due while Config.MaxInFlight are in flight is dropped, and
// counted. Its latencies run from each request's due time, so that a late
// start (the load tool behind) counts against them. RunSearch steps an
// open loop's rate up until its p99 exceeds Config.P99 or fewer than 99%
// of its requests are answered, and reports the last rate within.
//
// In either loop each sign-up uses one of Config.Emails addresses (in an
// open loop, (1-Config.Dup) times its requests), every address at least
// once, the rest drawn at random, spelt in random letter case, and a
// staff id of its own. The addresses and their spellings follow
// from Config.Seed, so a run can be repeated; the staff ids never repeat.
//
// # The check
//
// Afterwards every node is asked, for every address, which staff it holds
// (GET /staff?email=X), and for its backstop_violations (GET /healthz).
// Report.Problems lists every broken guarantee: an address created twice
// (two 201s), a node listing two staff for one address, a node that does
// not list the one a 201 created, a unique index that fired, a 5xx.
//
// example_app/storm.go shows a Config filled from flags.
package storm
