package faultproxy

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"time"
)

// direction is one half of a link.
type direction int

const (
	clientToServer direction = iota
	serverToClient
)

// maxQueued bounds the chunks a direction reads ahead of its writer (under
// latency): beyond it the proxy stops reading, and the sender's kernel
// buffers take the rest.
const maxQueued = 64

// readSize is the largest chunk one read takes.
const readSize = 32 << 10

// chunk is what one read returned: bytes, then, when err is set, the end of
// the stream (io.EOF: a close) or its failure (anything else: a reset).
type chunk struct {
	b   []byte
	err error
	at  time.Time // when it was read, for Latency
}

// link is one client connection and, once dialed, its server connection.
// Each direction has a reader, which queues what it reads, and a writer,
// which delivers the queue in order when the direction flows.
//
// While a direction is silenced its reader reads only when nothing of that
// direction is queued: the proxy holds at most one chunk (or close) per
// direction, the rest stays in the kernel.
type link struct {
	p      *Proxy
	client *net.TCPConn
	ctx    context.Context // ended by shut
	cancel context.CancelFunc

	// Guarded by p.mu.
	server *net.TCPConn // nil until dialed
	queue  [2][]chunk   // per direction; the head stays queued while it is written
	ended  [2]bool      // per direction: its close was delivered
	closed bool
}

func newLink(p *Proxy, client *net.TCPConn) *link {
	ctx, cancel := context.WithCancel(p.ctx)
	return &link{p: p, client: client, ctx: ctx, cancel: cancel}
}

// ends returns the connection direction d reads from and the one it writes
// to.
func (l *link) ends(d direction) (src, dst *net.TCPConn) {
	if d == clientToServer {
		return l.client, l.server
	}
	return l.server, l.client
}

// read queues what direction d's source sends, until its end or the link's.
func (l *link) read(d direction) {
	p := l.p
	src, _ := l.ends(d)
	buf := make([]byte, readSize)
	for {
		p.mu.Lock()
		ok := p.waitLocked(l.ctx, func() bool {
			n := len(l.queue[d])
			return n == 0 || !p.silenced[d] && n < maxQueued
		})
		p.mu.Unlock()
		if !ok {
			return
		}
		n, err := src.Read(buf)
		if n == 0 && err == nil {
			continue
		}
		c := chunk{b: bytes.Clone(buf[:n]), err: err, at: time.Now()}
		p.mu.Lock()
		if l.closed {
			p.mu.Unlock()
			return
		}
		l.queue[d] = append(l.queue[d], c)
		p.held++
		p.broadcastLocked()
		p.mu.Unlock()
		if err != nil {
			return
		}
	}
}

// write delivers direction d's queue in order, each chunk when d flows and
// its latency has passed, until the end of the stream or the link.
func (l *link) write(d direction) {
	p := l.p
	_, dst := l.ends(d)
	for {
		p.mu.Lock()
		ok := p.waitLocked(l.ctx, func() bool {
			return len(l.queue[d]) > 0 && !p.silenced[d]
		})
		if !ok {
			p.mu.Unlock()
			return
		}
		c, due, changed := l.queue[d][0], l.queue[d][0].at.Add(p.latency), p.changed
		p.mu.Unlock()

		if wait := time.Until(due); wait > 0 {
			t := time.NewTimer(wait)
			select {
			case <-t.C:
			case <-changed: // a fault changed: look again
			case <-l.ctx.Done():
			}
			t.Stop()
			continue
		}
		if len(c.b) > 0 {
			if _, err := dst.Write(c.b); err != nil {
				l.shut(true)
				return
			}
		}
		switch {
		case c.err == nil:
			l.pop(d)
		case errors.Is(c.err, io.EOF):
			// An end of stream: pass it on as one (a half close), and
			// close the link once both directions have ended.
			_ = dst.CloseWrite()
			if l.pop(d) {
				l.shut(false)
			}
			return
		default:
			// A reset, or our own shut: reset the other side too.
			l.shut(true)
			return
		}
	}
}

// pop removes the head of direction d's queue, once delivered, and reports
// whether both directions have now delivered their close.
func (l *link) pop(d direction) (bothEnded bool) {
	p := l.p
	p.mu.Lock()
	defer p.mu.Unlock()
	if l.closed {
		return false
	}
	if l.queue[d][0].err != nil {
		l.ended[d] = true
	}
	l.queue[d] = l.queue[d][1:]
	p.held--
	p.broadcastLocked()
	return l.ended[clientToServer] && l.ended[serverToClient]
}

// shut closes both connections of the link, abruptly (a reset) when
// abrupt, drops what it held and removes it from the proxy. Shutting a shut
// link is a no-op.
func (l *link) shut(abrupt bool) {
	p := l.p
	p.mu.Lock()
	if l.closed {
		p.mu.Unlock()
		return
	}
	l.closed = true
	server := l.server
	p.mu.Unlock()

	l.cancel()
	for _, c := range []*net.TCPConn{l.client, server} {
		if c == nil {
			continue
		}
		if abrupt {
			reset(c)
		} else {
			_ = c.Close()
		}
	}

	p.mu.Lock()
	defer p.mu.Unlock()
	for d := range l.queue {
		p.held -= len(l.queue[d])
		l.queue[d] = nil
	}
	delete(p.links, l)
	p.broadcastLocked()
}
