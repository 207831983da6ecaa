// Package faultproxy is an in-process TCP proxy for tests that puts network
// faults between a client (pgx, say) and a server (PostgreSQL): black holes,
// one-way silences, latency, cuts, refused or hanging connects. It listens
// on 127.0.0.1 only.
//
//	p, err := faultproxy.New(serverAddr) // "127.0.0.1:5432"
//	if err != nil {
//		t.Fatal(err)
//	}
//	t.Cleanup(func() { _ = p.Close() })
//	// point the client at p.Addr(), then:
//	p.BlackHole() // nothing passes, closes included
//	p.Heal()      // what was held is delivered in order
//	p.Cut()       // every connection is reset
//
// docs/testing.md#internalfaultproxy describes the model and its limits.
package faultproxy
