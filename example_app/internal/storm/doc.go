// Package storm is the load generator behind example_app storm: it sends
// many POST /staff sign-ups, a few distinct emails in random letter case,
// across the nodes of one example_app deployment, then checks what the
// nodes hold.
//
// # The storm
//
// Run sends Config.Requests sign-ups, Config.Concurrency at a time, to the
// targets in turn. Each uses one of Config.Emails addresses (every address
// at least once, the rest drawn at random), spelt in random letter case,
// and a staff id of its own. The addresses and their spellings follow
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
// # Example
//
//	r, err := storm.Run(ctx, storm.Config{
//		Targets:     []string{"http://127.0.0.1:8080", "http://127.0.0.1:8081"},
//		Requests:    storm.DefaultRequests,
//		Emails:      storm.DefaultEmails,
//		Concurrency: storm.DefaultConcurrency,
//		Timeout:     storm.DefaultTimeout,
//		Progress:    storm.ProgressLines,
//		Stderr:      os.Stderr,
//	})
//	if r != nil {
//		r.Write(os.Stdout)
//	}
//	failed := err != nil || len(r.Problems) > 0
package storm
