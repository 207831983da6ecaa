// Package natstest gives tests a real NATS server with JetStream, run in
// the test's own process from github.com/nats-io/nats-server/v2, so that
// tests of the NATS transport need no binary and no Docker:
//
//	func TestX(t *testing.T) {
//		srv := natstest.Start(t) // 127.0.0.1, a free port, a t.TempDir() store
//		tr, err := natstransport.New(ctx, srv.URL(), natstransport.Config{NodeID: "node-a"})
//		...
//		srv.Stop()  // the server is gone: clients see a closed socket
//		srv.Start() // the same port and store: streams and consumers are back
//	}
//
// The server is shut down when the test ends. Cleanups run last in, first
// out, so the clients a test creates after Start (and registers cleanups
// for) close while the server still runs.
//
// Every goroutine the server starts ends with its Shutdown, which
// Stop and the cleanup wait for, so goleak.VerifyTestMain holds.
package natstest
