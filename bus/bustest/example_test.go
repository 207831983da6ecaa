package bustest_test

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"

	"github.com/claimbus/claimbus/bus"
	"github.com/claimbus/claimbus/bus/bustest"
	"github.com/claimbus/claimbus/commands"
	"github.com/claimbus/claimbus/middleware"
	"github.com/claimbus/claimbus/uniqueness"
)

// myPubSubHarness is the harness of a Pub/Sub of your own; here a
// GoChannel, shared by the nodes of each test. A GoChannel has no
// competing consumers and keeps nothing for later subscribers, so it
// declares no capability: Run logs the checks it skips for that.
func myPubSubHarness() bustest.Harness {
	return bustest.Harness{
		NewBackend: func(t testing.TB) bustest.Backend {
			ps := gochannel.NewGoChannel(gochannel.Config{}, nil)
			t.Cleanup(func() { _ = ps.Close() })
			return bustest.Backend{Node: func(_ testing.TB, cfg bus.Config, _ bustest.NodeOptions) bus.Config {
				cfg.Publisher, cfg.Subscriber = ps, ps
				return cfg
			}}
		},
	}
}

// TestMyPubSubConformance is what a user writes to check their Pub/Sub.
func TestMyPubSubConformance(t *testing.T) {
	t.Parallel()
	bustest.Run(t, myPubSubHarness())
}

// Run the suite against your own Pub/Sub: describe it with a Harness and
// call Run from a test of yours,
//
//	func TestMyPubSubConformance(t *testing.T) { bustest.Run(t, myPubSubHarness()) }
//
// from a package whose TestMain checks for leaked goroutines (goleak).
func ExampleRun() {
	h := myPubSubHarness()
	fmt.Println("competing consumers:", h.MultiNode, "durable:", h.Durable, "redelivery:", h.Redelivery)
	// Output: competing consumers: false durable: false redelivery: false
}

// An application's integration test: CreateStaff twice with one email,
// the second is already_taken on field email; after Reset the email is
// free again. In the application it is a test function:
//
//	func TestCreateStaffTwice(t *testing.T) { ... the body below ... }
func Example_integrationTest() {
	runAsTest(func(t testing.TB) {
		ctx := context.Background()
		staff := map[string]string{} // the application's table: email → staff id
		b := bustest.NewBus(t, bustest.Options{
			Middleware: func(s bustest.Stores) ([]middleware.Middleware, error) {
				unique, err := uniqueness.New(uniqueness.Config{Locker: s.Locks, Rules: []uniqueness.Rule{
					uniqueness.Field(uniqueness.Names{Field: "email", Scope: "staff.email"}, func(c *commands.CreateStaff) string { return c.Email },
						func(_ context.Context, email string) (bool, error) { _, ok := staff[email]; return ok, nil },
						uniqueness.Reserve(s.Claims, time.Minute)),
				}})
				return []middleware.Middleware{unique}, err
			},
			Handlers: func(b *bus.Bus) error {
				return bus.Handle(b, func(_ context.Context, c *commands.CreateStaff) (string, error) {
					staff[c.Email] = c.StaffID
					return c.StaffID, nil
				})
			},
		})

		id, err := bus.Dispatch[string](ctx, b.Bus, &commands.CreateStaff{StaffID: "s-1", Email: "ann@example.org", Name: "Ann"})
		fmt.Println("first:", id, err)
		_, err = bus.Dispatch[string](ctx, b.Bus, &commands.CreateStaff{StaffID: "s-2", Email: "ann@example.org", Name: "Ann"})
		bustest.RequireRejection(t, err, middleware.CodeAlreadyTaken, "email")
		fmt.Println("second:", err)

		// Between tests: every claim and lock forgotten (and the
		// application's own tables emptied).
		clear(staff)
		if err := b.Reset(ctx); err != nil {
			t.Fatalf("Reset: %v", err)
		}
		id, err = bus.Dispatch[string](ctx, b.Bus, &commands.CreateStaff{StaffID: "s-3", Email: "ann@example.org", Name: "Ann"})
		fmt.Println("after Reset:", id, err)
	})
	// Output:
	// first: s-1 <nil>
	// second: already_taken: email: email is already taken
	// after Reset: s-3 <nil>
}

// runAsTest runs test as go test would run a test function, with a
// testing.TB whose failures it prints and whose cleanups it runs at the
// end: an example has no *testing.T.
func runAsTest(test func(t testing.TB)) {
	t := &exampleTB{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer t.cleanup()
		test(t)
	}()
	<-done
}

// exampleTB is the testing.TB of runAsTest.
type exampleTB struct {
	testing.TB
	cleanups []func()
}

func (t *exampleTB) Helper()                   {}
func (t *exampleTB) Cleanup(f func())          { t.cleanups = append(t.cleanups, f) }
func (t *exampleTB) Errorf(f string, a ...any) { fmt.Printf("FAIL: "+f+"\n", a...) }
func (t *exampleTB) Fatalf(f string, a ...any) {
	t.Errorf(f, a...)
	runtime.Goexit()
}

// FailNow ends the test, as require's failures do.
func (t *exampleTB) FailNow() { runtime.Goexit() }

// Log drops the test log (the failure log of the bus goes there): an
// example prints only its Output.
func (t *exampleTB) Log(...any) {}

func (t *exampleTB) cleanup() {
	for _, f := range slices.Backward(t.cleanups) {
		f()
	}
}
