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
// # The model
//
// A real partition drops packets and TCP retransmits them; a userspace
// proxy cannot drop what the kernel has already acknowledged, so a silenced
// direction is one the proxy stops reading and stops writing. The proxy
// holds at most one chunk of a silenced direction (what one read returned,
// or a close; Stats().Held counts it); the rest waits in the kernel buffers
// until they fill and the sender's writes block, which takes a few hundred
// kilobytes to megabytes: a client's small writes into a black hole
// succeed, only its reads wait. Nothing is lost: Heal delivers everything
// in order.
//
// A close is a chunk like the bytes: while its direction is silenced the
// other side does not see it. An end of stream is passed on as a half close
// (CloseWrite), a reset as a reset, and a connection is closed once both of
// its directions have ended.
//
// # What the model does not do
//
// Both peers talk to the proxy's kernel, which keeps acknowledging and
// answering keepalive probes during a black hole: TCP keepalive,
// tcp_user_timeout and retransmission timeouts never fire, on either side,
// and PostgreSQL's client_connection_check_interval sees a live socket.
// Only application deadlines (a context, statement_timeout,
// idle_in_transaction_session_timeout) notice a black hole. To play a
// server that gave up on a partitioned client, terminate its backend during
// the black hole (the close is held until Heal) or Cut.
//
// pgx, when a query's context ends, sends a cancel request on a new
// connection, which a black hole holds too: its clean-up goroutine lasts
// until Heal (or 15 s). A test with goleak heals or closes the proxy and
// waits for PgConn().CleanupDone().
//
// Faults act on bytes, not on the connect itself: Latency does not delay a
// connect, and a connection accepted during a silence or in Hold mode is
// accepted by the proxy's kernel at once (the client's connect succeeds)
// and dialed only once both directions flow.
package faultproxy
