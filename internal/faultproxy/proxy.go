package faultproxy

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"slices"
	"sync"
	"time"
)

// Proxy forwards TCP connections from 127.0.0.1 to one target and injects
// faults into them. Its methods are safe for concurrent use; a fault applies
// at once to every open connection and to the ones accepted later.
type Proxy struct {
	ln     *net.TCPListener
	target string
	ctx    context.Context // ended by Close: ends the dials and every link
	cancel context.CancelFunc
	wg     sync.WaitGroup // every goroutine of the proxy
	done   chan struct{}  // closed when Close has returned

	mu       sync.Mutex
	closed   bool
	silenced [2]bool // per direction: bytes are held, not forwarded
	latency  time.Duration
	newConns NewConnMode
	links    map[*link]struct{}
	accepted int
	held     int
	changed  chan struct{} // closed and replaced on every change of the above
}

// NewConnMode says what the proxy does with the connections it accepts.
type NewConnMode int

const (
	// Forward dials the target for each new connection and forwards it
	// (the default).
	Forward NewConnMode = iota
	// Refuse resets each new connection at once (SetLinger(0), then close),
	// without dialing the target: the client's connect, or its first read,
	// fails with a reset (ECONNRESET), much as from a refused connect.
	Refuse
	// Hold keeps each new connection open without dialing the target and
	// without reading from it, as a SYN lost in a partition: the client's
	// connect completes (the kernel accepts it) but nothing answers. Held
	// connections are forwarded when the mode goes back to Forward, reset
	// when it becomes Refuse.
	Hold
)

// Stats counts what the proxy has seen.
type Stats struct {
	// Conns is the number of client connections open: forwarding, or
	// accepted and not yet forwarded (Hold, or a silence when they came).
	Conns int
	// Accepted is the number of client connections accepted since New,
	// refused ones included.
	Accepted int
	// Held is the number of chunks read from one side and not yet delivered
	// to the other (held by a silence, delayed by Latency, or being
	// written), over every connection and both directions; a close (end of
	// stream or reset) counts as one chunk. A chunk counts until its write
	// has returned, which can be just after the peer has read it.
	Held int
}

// New listens on a free port of 127.0.0.1 and forwards every connection
// accepted there to target (host:port), until Close.
func New(target string) (*Proxy, error) {
	if _, _, err := net.SplitHostPort(target); err != nil {
		return nil, fmt.Errorf("faultproxy: target %q: %w", target, err)
	}
	ln, err := net.ListenTCP("tcp", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		return nil, fmt.Errorf("faultproxy: listen: %w", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	p := &Proxy{
		ln:      ln,
		target:  target,
		ctx:     ctx,
		cancel:  cancel,
		done:    make(chan struct{}),
		links:   make(map[*link]struct{}),
		changed: make(chan struct{}),
	}
	p.wg.Go(p.acceptLoop)
	return p, nil
}

// Addr is the address the proxy listens on (127.0.0.1:port).
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Close stops the listener, resets every connection (held bytes are
// dropped) and waits until every goroutine of the proxy has returned.
// Closing a closed proxy is a no-op.
func (p *Proxy) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		<-p.done
		return nil
	}
	p.closed = true
	links := slices.Collect(maps.Keys(p.links))
	p.broadcastLocked()
	p.mu.Unlock()

	err := p.ln.Close()
	p.cancel()
	for _, l := range links {
		l.shut(true)
	}
	p.wg.Wait()
	close(p.done)
	if err != nil {
		return fmt.Errorf("faultproxy: close: %w", err)
	}
	return nil
}

// BlackHole holds the bytes of both directions: the proxy stops reading and
// stops writing, so the kernel buffers fill and the senders' writes
// eventually block. A close by either side is held too: the other side
// does not see it until Heal. New connections are held, not dialed. It
// replaces SilenceServerToClient or SilenceClientToServer.
func (p *Proxy) BlackHole() { p.silence(true, true) }

// SilenceServerToClient holds what the server sends (bytes and close) while
// what the client sends still flows. Connections accepted meanwhile are held
// whole, not dialed, since a real handshake needs both directions. It
// replaces BlackHole or SilenceClientToServer.
func (p *Proxy) SilenceServerToClient() { p.silence(false, true) }

// SilenceClientToServer holds what the client sends (bytes and close) while
// what the server sends still flows. Connections accepted meanwhile are held
// whole, not dialed. It replaces BlackHole or SilenceServerToClient.
func (p *Proxy) SilenceClientToServer() { p.silence(true, false) }

func (p *Proxy) silence(clientToServer, serverToClient bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.silenced = [2]bool{clientToServer, serverToClient}
	p.broadcastLocked()
}

// Latency delays each chunk, in both directions, until d after the proxy
// read it; order is kept, and chunks read meanwhile are not delayed further.
// A close is delayed like the bytes. Latency(0) removes it. It combines with
// a silence: a chunk held longer than d goes out as soon as its direction
// flows again.
func (p *Proxy) Latency(d time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.latency = max(d, 0)
	p.broadcastLocked()
}

// SetNewConns says what happens to connections accepted from now on, and to
// those accepted earlier and not forwarded yet (see NewConnMode).
func (p *Proxy) SetNewConns(m NewConnMode) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.newConns = m
	p.broadcastLocked()
}

// Heal ends every fault: both directions flow again, without latency, and
// new connections are forwarded. What was held is delivered in order,
// closes included (so a server sees a client's close made during a black
// hole once the network heals); connections held at accept are dialed.
func (p *Proxy) Heal() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.silenced = [2]bool{}
	p.latency = 0
	p.newConns = Forward
	p.broadcastLocked()
}

// Cut resets every open connection, on both sides (SetLinger(0), so the
// peers see a reset, not an end of stream), dropping what was held, and
// returns how many there were. New connections are still accepted,
// according to SetNewConns.
func (p *Proxy) Cut() int {
	p.mu.Lock()
	links := slices.Collect(maps.Keys(p.links))
	p.mu.Unlock()
	for _, l := range links {
		l.shut(true)
	}
	return len(links)
}

// Stats returns the proxy's counters now.
func (p *Proxy) Stats() Stats {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.statsLocked()
}

func (p *Proxy) statsLocked() Stats {
	return Stats{Conns: len(p.links), Accepted: p.accepted, Held: p.held}
}

// Await waits until cond, called with the counters after every change,
// returns true. It returns ctx's error when ctx ends first, and ErrClosed
// when the proxy is closed and cond is still false.
func (p *Proxy) Await(ctx context.Context, cond func(Stats) bool) error {
	for {
		p.mu.Lock()
		s, changed := p.statsLocked(), p.changed
		p.mu.Unlock()
		if cond(s) {
			return nil
		}
		select {
		case <-changed:
		case <-p.done:
			if cond(p.Stats()) {
				return nil
			}
			return ErrClosed
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// broadcastLocked wakes every goroutine waiting for a change of p's state.
func (p *Proxy) broadcastLocked() {
	close(p.changed)
	p.changed = make(chan struct{})
}

// waitLocked waits, with p.mu held, until cond holds (true) or ctx ends
// (false). p.mu is held again on return.
func (p *Proxy) waitLocked(ctx context.Context, cond func() bool) bool {
	for !cond() {
		changed := p.changed
		p.mu.Unlock()
		select {
		case <-changed:
		case <-ctx.Done():
			p.mu.Lock()
			return false
		}
		p.mu.Lock()
	}
	return true
}

// acceptLoop accepts connections until the listener is closed.
func (p *Proxy) acceptLoop() {
	for {
		c, err := p.ln.AcceptTCP()
		if errors.Is(err, net.ErrClosed) {
			return // by Close
		}
		if err != nil {
			// A passing failure (out of file descriptors, say): retry
			// shortly, as net/http does.
			select {
			case <-p.ctx.Done():
				return
			case <-time.After(10 * time.Millisecond):
				continue
			}
		}
		p.wg.Go(func() { p.serve(c) })
	}
}

// serve holds a new connection until it may be forwarded, dials the target
// and starts the link's four goroutines (a reader and a writer for each
// direction).
func (p *Proxy) serve(client *net.TCPConn) {
	p.mu.Lock()
	p.accepted++
	if p.closed || p.newConns == Refuse {
		p.broadcastLocked()
		p.mu.Unlock()
		reset(client)
		return
	}
	l := newLink(p, client)
	p.links[l] = struct{}{}
	p.broadcastLocked()
	ok := p.waitLocked(l.ctx, func() bool {
		return p.newConns == Refuse ||
			p.newConns == Forward && !p.silenced[clientToServer] && !p.silenced[serverToClient]
	})
	refuse := p.newConns == Refuse
	p.mu.Unlock()
	if !ok {
		return // shut by Cut or Close
	}
	if refuse {
		l.shut(true)
		return
	}
	var d net.Dialer
	c, err := d.DialContext(l.ctx, "tcp", p.target)
	if err != nil {
		l.shut(true) // the client sees a reset, as from a refused connect
		return
	}
	server := c.(*net.TCPConn)
	p.mu.Lock()
	if l.closed {
		p.mu.Unlock()
		reset(server)
		return
	}
	l.server = server
	p.mu.Unlock()
	for _, d := range []direction{clientToServer, serverToClient} {
		p.wg.Go(func() { l.read(d) })
		p.wg.Go(func() { l.write(d) })
	}
}

// reset closes c abruptly: the peer sees a reset (RST), not an end of
// stream.
func reset(c *net.TCPConn) {
	_ = c.SetLinger(0)
	_ = c.Close()
}
