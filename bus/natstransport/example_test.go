package natstransport_test

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/claimbus/claimbus/bus"
	"github.com/claimbus/claimbus/bus/natstransport"
)

type Greet struct{ Name string }

// Two nodes on one NATS server: node A dispatches, node B handles, the
// reply comes back to A. The server runs in this process for the example;
// a deployment points New at its NATS cluster.
func Example() {
	dir, err := os.MkdirTemp("", "natstransport-example")
	check(err)
	defer os.RemoveAll(dir)
	srv, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: dir, NoLog: true, NoSigs: true})
	check(err)
	srv.Start()
	defer srv.WaitForShutdown()
	defer srv.Shutdown()
	if !srv.ReadyForConnections(10 * time.Second) {
		panic("the NATS server is not ready")
	}
	ctx := context.Background()

	// Node B handles Greet.
	trB, err := natstransport.New(ctx, srv.ClientURL(), natstransport.Config{NodeID: "node-b"})
	check(err)
	defer trB.Close()
	b, err := bus.New(trB.BusConfig(bus.Config{}))
	check(err)
	check(bus.Handle(b, func(_ context.Context, g *Greet) (string, error) { return "hello, " + g.Name, nil }))
	check(b.Start(ctx))
	defer b.Close() // before trB.Close

	// Node A only sends.
	trA, err := natstransport.New(ctx, srv.ClientURL(), natstransport.Config{NodeID: "node-a"})
	check(err)
	defer trA.Close()
	a, err := bus.New(trA.BusConfig(bus.Config{}))
	check(err)
	check(a.Start(ctx))
	defer a.Close()

	got, err := bus.Dispatch[string](ctx, a, &Greet{Name: "Ann"})
	check(err)
	fmt.Println(got)
	// Output:
	// hello, Ann
}

func check(err error) {
	if err != nil {
		panic(err)
	}
}
