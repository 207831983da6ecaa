package faultproxy_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/claimbus/claimbus/internal/faultproxy"
)

// bound caps every wait of these tests: it is a safety net against a hang,
// never a timing assertion.
const bound = 10 * time.Second

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), bound)
	t.Cleanup(cancel)
	return ctx
}

// backend is a real TCP server on 127.0.0.1 that hands each connection it
// accepts to the test, which drives the server's side itself.
type backend struct {
	ln    net.Listener
	conns chan net.Conn
}

func newBackend(t *testing.T) *backend {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	b := &backend{ln: ln, conns: make(chan net.Conn)}
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		all  []net.Conn
		done = make(chan struct{})
	)
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			all = append(all, c)
			mu.Unlock()
			select {
			case b.conns <- c:
			case <-done:
				return
			}
		}
	})
	t.Cleanup(func() {
		close(done)
		_ = ln.Close()
		wg.Wait()
		for _, c := range all {
			_ = c.Close()
		}
	})
	return b
}

// accept returns the next connection the backend accepted.
func (b *backend) accept(t *testing.T) net.Conn {
	t.Helper()
	select {
	case c := <-b.conns:
		return c
	case <-time.After(bound):
		t.Fatal("the backend accepted no connection")
		return nil
	}
}

// requireNoConn checks that the backend has accepted nothing the test has
// not taken. Use it only where the proxy has decided not to dial.
func (b *backend) requireNoConn(t *testing.T) {
	t.Helper()
	select {
	case <-b.conns:
		t.Fatal("the backend accepted a connection")
	default:
	}
}

// setup starts a backend and a proxy to it, both closed when t ends.
func setup(t *testing.T) (*faultproxy.Proxy, *backend) {
	t.Helper()
	b := newBackend(t)
	p, err := faultproxy.New(b.ln.Addr().String())
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, p.Close()) })
	return p, b
}

// dial connects to the proxy; the connection is closed when t ends.
func dial(t *testing.T, p *faultproxy.Proxy) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", p.Addr())
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// pair connects a client through the proxy and returns both ends.
func pair(t *testing.T, p *faultproxy.Proxy, b *backend) (client, server net.Conn) {
	t.Helper()
	client = dial(t, p)
	return client, b.accept(t)
}

func send(t *testing.T, c net.Conn, s string) {
	t.Helper()
	_, err := c.Write([]byte(s))
	require.NoError(t, err)
}

// recv reads exactly len(want) bytes from c and checks them.
func recv(t *testing.T, c net.Conn, want string) {
	t.Helper()
	require.NoError(t, c.SetReadDeadline(time.Now().Add(bound)))
	got := make([]byte, len(want))
	_, err := io.ReadFull(c, got)
	require.NoError(t, err)
	require.Equal(t, want, string(got))
}

// readErr waits for the end of c's stream and returns its error (io.EOF for
// an end of stream).
func readErr(t *testing.T, c net.Conn) error {
	t.Helper()
	require.NoError(t, c.SetReadDeadline(time.Now().Add(bound)))
	n, err := c.Read(make([]byte, 1))
	require.Zero(t, n, "data instead of the end of the stream")
	require.NotErrorIs(t, err, os.ErrDeadlineExceeded, "the stream did not end")
	return err
}

// inbox says what c's socket has received and c has not read, without
// blocking and without consuming it: "" (nothing), "data", "eof" or
// "reset". Over loopback a write is in the peer's socket when it returns,
// so "" means the proxy has not delivered anything.
func inbox(c net.Conn) (string, error) {
	raw, err := c.(*net.TCPConn).SyscallConn()
	if err != nil {
		return "", err
	}
	var (
		n    int
		rerr error
	)
	err = raw.Read(func(fd uintptr) bool {
		n, _, rerr = syscall.Recvfrom(int(fd), make([]byte, 1), syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		return true
	})
	switch {
	case err != nil:
		return "", err
	case errors.Is(rerr, syscall.EAGAIN):
		return "", nil
	case errors.Is(rerr, syscall.ECONNRESET):
		return "reset", nil
	case rerr != nil:
		return "", rerr
	case n == 0:
		return "eof", nil
	}
	return "data", nil
}

// requireNothingArrives checks that c's socket has received nothing: at
// once, which a correct proxy guarantees once it holds what was sent, and
// for a short while after, to catch a proxy that would deliver it late.
// Absence can only be watched for a while; the watch cannot fail a correct
// proxy however slow the machine.
func requireNothingArrives(t *testing.T, c net.Conn, msg string) {
	t.Helper()
	got, err := inbox(c)
	require.NoError(t, err)
	require.Empty(t, got, msg)
	require.Never(t, func() bool {
		got, err := inbox(c)
		return got != "" || err != nil
	}, 50*time.Millisecond, 5*time.Millisecond, msg)
}

// await waits until cond holds for the proxy's counters.
func await(t *testing.T, p *faultproxy.Proxy, what string, cond func(faultproxy.Stats) bool) {
	t.Helper()
	require.NoError(t, p.Await(ctxT(t), cond), "waiting until %s; stats %+v", what, p.Stats())
}

func held(n int) func(faultproxy.Stats) bool {
	return func(s faultproxy.Stats) bool { return s.Held == n }
}

func conns(n int) func(faultproxy.Stats) bool {
	return func(s faultproxy.Stats) bool { return s.Conns == n }
}

func TestNewRejectsABadTarget(t *testing.T) {
	t.Parallel()
	_, err := faultproxy.New("no port")
	require.ErrorContains(t, err, "faultproxy: target")
}

func TestForwardsAndPassesCloses(t *testing.T) {
	t.Parallel()
	p, b := setup(t)
	client, server := pair(t, p, b)
	require.Contains(t, p.Addr(), "127.0.0.1:")

	send(t, client, "hello")
	recv(t, server, "hello")
	send(t, server, "world")
	recv(t, client, "world")
	// Held counts a chunk until its write has returned, which may be after
	// the peer has read it.
	await(t, p, "nothing is held", held(0))
	require.Equal(t, faultproxy.Stats{Conns: 1, Accepted: 1}, p.Stats())

	// A close is passed on as an end of stream, and the link ends when
	// both sides have closed.
	require.NoError(t, client.Close())
	require.ErrorIs(t, readErr(t, server), io.EOF)
	require.NoError(t, server.Close())
	await(t, p, "the link is closed", conns(0))
}

func TestBlackHoleHoldsBytesUntilHeal(t *testing.T) {
	t.Parallel()
	p, b := setup(t)
	client, server := pair(t, p, b)
	p.BlackHole()

	send(t, client, "one")
	await(t, p, "the proxy holds the first chunk", held(1))
	send(t, client, "two") // stays in the kernel: the proxy reads no more
	send(t, client, "three")
	send(t, server, "back")
	await(t, p, "the proxy holds a chunk each way", held(2))
	requireNothingArrives(t, server, "bytes crossed a black hole")
	requireNothingArrives(t, client, "bytes crossed a black hole")

	p.Heal()
	recv(t, server, "onetwothree")
	recv(t, client, "back")
	await(t, p, "nothing is held", held(0))
}

func TestBlackHoleBlocksTheSender(t *testing.T) {
	t.Parallel()
	p, b := setup(t)
	client, server := pair(t, p, b)
	p.BlackHole()

	// The proxy stops reading: once the kernel buffers are full, the
	// client's write blocks, far below 64 MiB (the proxy's receive buffer
	// does not grow while nothing reads it; the client's send buffer is
	// kept small so that the test moves little data).
	pattern := make([]byte, 251)
	for i := range pattern {
		pattern[i] = byte(i)
	}
	payload := bytes.Repeat(pattern, 64<<20/len(pattern))
	require.NoError(t, client.(*net.TCPConn).SetWriteBuffer(64<<10))
	require.NoError(t, client.SetWriteDeadline(time.Now().Add(200*time.Millisecond)))
	n, err := client.Write(payload)
	require.ErrorIs(t, err, os.ErrDeadlineExceeded, "a write of 64 MiB into a black hole did not block")
	require.Equal(t, 1, p.Stats().Held, "the proxy read more than one chunk")
	requireNothingArrives(t, server, "bytes crossed a black hole")

	// Nothing was lost.
	p.Heal()
	got := make([]byte, n)
	require.NoError(t, server.SetReadDeadline(time.Now().Add(bound)))
	_, err = io.ReadFull(server, got)
	require.NoError(t, err)
	require.True(t, bytes.Equal(payload[:n], got), "the %d bytes were not delivered in order", n)
}

func TestBlackHoleHoldsCloses(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		closer func(client, server net.Conn) (closes, sees net.Conn)
	}{
		{"client closes", func(c, s net.Conn) (net.Conn, net.Conn) { return c, s }},
		{"server closes", func(c, s net.Conn) (net.Conn, net.Conn) { return s, c }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			p, b := setup(t)
			closes, sees := tc.closer(pair(t, p, b))
			p.BlackHole()

			require.NoError(t, closes.Close())
			await(t, p, "the proxy holds the close", held(1))
			requireNothingArrives(t, sees, "a close crossed a black hole")

			p.Heal()
			require.ErrorIs(t, readErr(t, sees), io.EOF)
			require.NoError(t, sees.Close())
			await(t, p, "the link is closed", conns(0))
		})
	}
}

func TestSilenceOneWay(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		silence func(*faultproxy.Proxy)
		// serverSilenced: the server's bytes are held, the client's flow
		// (or the other way round).
		serverSilenced bool
	}{
		{"server to client", (*faultproxy.Proxy).SilenceServerToClient, true},
		{"client to server", (*faultproxy.Proxy).SilenceClientToServer, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			p, b := setup(t)
			client, server := pair(t, p, b)
			flowing, silenced := client, server
			if !tc.serverSilenced {
				flowing, silenced = server, client
			}
			tc.silence(p)

			send(t, flowing, "ping")
			recv(t, peer(flowing, client, server), "ping")
			await(t, p, "the ping is delivered", held(0))
			send(t, silenced, "pong")
			await(t, p, "the proxy holds the silenced chunk", held(1))
			requireNothingArrives(t, flowing, "bytes crossed a silenced direction")

			p.Heal()
			recv(t, flowing, "pong")
		})
	}
}

// peer returns the other end of the pair (client, server).
func peer(c, client, server net.Conn) net.Conn {
	if c == client {
		return server
	}
	return client
}

func TestLatencyDelaysEachWayInOrder(t *testing.T) {
	t.Parallel()
	const d = 50 * time.Millisecond
	p, b := setup(t)
	client, server := pair(t, p, b)
	p.Latency(d)

	start := time.Now()
	send(t, client, "a")
	recv(t, server, "a")
	require.GreaterOrEqual(t, time.Since(start), d, "client to server")

	start = time.Now()
	send(t, server, "b")
	recv(t, client, "b")
	require.GreaterOrEqual(t, time.Since(start), d, "server to client")

	start = time.Now()
	for _, s := range []string{"1", "2", "3", "4"} {
		send(t, client, s)
	}
	recv(t, server, "1234")
	require.GreaterOrEqual(t, time.Since(start), d)

	p.Latency(0)
	send(t, client, "c")
	recv(t, server, "c")
}

func TestCutResetsBothSides(t *testing.T) {
	t.Parallel()
	p, b := setup(t)
	client, server := pair(t, p, b)
	send(t, client, "x")
	recv(t, server, "x")

	blocked := make(chan error, 1)
	go func() { // ends with the read: at Cut, or at the latest when t's cleanup closes client
		_, err := client.Read(make([]byte, 1))
		blocked <- err
	}()
	require.Equal(t, 1, p.Cut())
	select {
	case err := <-blocked:
		require.ErrorIs(t, err, syscall.ECONNRESET)
	case <-time.After(bound):
		t.Fatal("a read blocked across Cut did not fail")
	}
	require.ErrorIs(t, readErr(t, server), syscall.ECONNRESET)
	await(t, p, "no connection is open", conns(0))

	// New connections are still forwarded.
	client, server = pair(t, p, b)
	send(t, client, "y")
	recv(t, server, "y")
}

func TestNewConns(t *testing.T) {
	t.Parallel()
	t.Run("refused", func(t *testing.T) {
		t.Parallel()
		p, b := setup(t)
		p.SetNewConns(faultproxy.Refuse)
		// The reset can come before the connect returns, or after.
		client, err := net.Dial("tcp", p.Addr())
		if err == nil {
			defer client.Close()
			err = readErr(t, client)
		}
		require.ErrorIs(t, err, syscall.ECONNRESET)
		await(t, p, "the connection is accepted", func(s faultproxy.Stats) bool { return s.Accepted == 1 })
		require.Equal(t, faultproxy.Stats{Accepted: 1}, p.Stats())
		b.requireNoConn(t)
	})
	t.Run("held, then forwarded", func(t *testing.T) {
		t.Parallel()
		p, b := setup(t)
		p.SetNewConns(faultproxy.Hold)
		client := dial(t, p)
		send(t, client, "x")
		await(t, p, "the connection is accepted", conns(1))
		b.requireNoConn(t)

		p.SetNewConns(faultproxy.Forward)
		recv(t, b.accept(t), "x")
	})
	t.Run("held, then refused", func(t *testing.T) {
		t.Parallel()
		p, b := setup(t)
		p.SetNewConns(faultproxy.Hold)
		client := dial(t, p)
		await(t, p, "the connection is accepted", conns(1))
		p.SetNewConns(faultproxy.Refuse)
		require.ErrorIs(t, readErr(t, client), syscall.ECONNRESET)
		await(t, p, "no connection is open", conns(0))
		b.requireNoConn(t)
	})
	t.Run("accepted in a black hole, dialed at Heal", func(t *testing.T) {
		t.Parallel()
		p, b := setup(t)
		p.BlackHole()
		client := dial(t, p)
		send(t, client, "x")
		await(t, p, "the connection is accepted", conns(1))
		b.requireNoConn(t)

		p.Heal()
		recv(t, b.accept(t), "x")
	})
}

func TestCloseEndsEverything(t *testing.T) {
	t.Parallel()
	p, b := setup(t)
	forwarded, server := pair(t, p, b)
	send(t, forwarded, "x")
	recv(t, server, "x")
	p.SetNewConns(faultproxy.Hold)
	pending := dial(t, p)
	await(t, p, "both connections are open", conns(2))

	require.NoError(t, p.Close())
	require.Equal(t, 0, p.Stats().Conns)
	require.ErrorIs(t, readErr(t, forwarded), syscall.ECONNRESET)
	require.ErrorIs(t, readErr(t, server), syscall.ECONNRESET)
	require.ErrorIs(t, readErr(t, pending), syscall.ECONNRESET)
	_, err := net.Dial("tcp", p.Addr())
	require.Error(t, err, "a closed proxy accepted a connection")
	require.ErrorIs(t, p.Await(ctxT(t), conns(5)), faultproxy.ErrClosed)
	require.NoError(t, p.Close(), "a second Close")
	// goleak.VerifyTestMain (pgtest.Main) checks that no goroutine is left.
}
