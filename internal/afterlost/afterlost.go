// Package afterlost calls a function when a lock is lost, without a
// goroutine or a timer per lock: the stores keep the registrations of each
// lock in a List, under their own mutex, take them when they end the lock
// lost and Fire them once their mutex is released. lockstore.AfterLost is
// its public face; the packages of this module that watch many locks
// register a Node embedded in a struct they allocate anyway, so that the
// watch costs no allocation.
package afterlost

import "sync/atomic"

// Target is told, once, that the lock it watches was lost.
type Target interface {
	LockLost()
}

// Func is a function as a Target.
type Func func()

// LockLost calls f.
func (f Func) LockLost() { f() }

// Watcher is implemented by the locks of this module's stores: WatchLost
// registers n, which is not registered anywhere, to be fired when the lock
// is lost. On a lock already lost it fires n in a goroutine of its own; on
// a lock already released n is never fired.
type Watcher interface {
	WatchLost(n *Node)
}

// notifier is a lock of another package that calls f itself when it is
// lost, with the contract of lockstore.AfterLost.
type notifier interface {
	AfterLost(f func()) (stop func() bool)
}

// lostChan is the part of lockstore.Lock a watch falls back to.
type lostChan interface {
	Lost() <-chan struct{}
}

// States of a Node.
const (
	pending uint32 = iota
	fired
	stopped
)

// Node is one registration: a Target, told once when the lock is lost
// unless Stop comes first. A Node is registered once; the zero Node with
// its target set by Watch is ready.
type Node struct {
	target Target
	state  atomic.Uint32
	// depth is, while n heads a List, the number of nodes in it (n and
	// those after it), kept in the word state leaves free so that a List is
	// one pointer. The List's owner guards it, as next.
	depth uint32
	// next links the nodes of one List; the List's owner guards it.
	next *Node
}

// stopTarget is the target of a watch that is not in a List, a
// third-party store's registration or the fallback goroutine, with what
// ends it.
type stopTarget struct {
	Target
	stop func() bool
}

// Watch registers n to tell t when l is lost, and must return before n's
// Stop is called: through l's WatchLost when l
// is a lock of this module, through its AfterLost when it has one, and
// otherwise with one goroutine that waits for l's Lost channel until then
// or until n.Stop. A lock whose Lost is nil is never lost.
func Watch(l lostChan, n *Node, t Target) {
	n.target = t
	switch w := l.(type) {
	case Watcher:
		w.WatchLost(n)
	case notifier:
		st := &stopTarget{Target: t}
		n.target = st
		st.stop = w.AfterLost(n.Fire)
	default:
		lost := l.Lost()
		if lost == nil {
			return
		}
		done := make(chan struct{})
		n.target = &stopTarget{Target: t, stop: func() bool { close(done); return true }}
		go func() {
			select {
			case <-lost:
				n.Fire()
			case <-done:
			}
		}()
	}
}

// Stop stops n from being fired. It reports whether it did: false when n
// was fired already (its target may still be running) or stopped before.
func (n *Node) Stop() bool {
	if !n.state.CompareAndSwap(pending, stopped) {
		return false
	}
	if st, ok := n.target.(*stopTarget); ok {
		st.stop()
	}
	return true
}

// Fire tells n's target that the lock was lost, unless n was fired or
// stopped before. It runs the target in the caller's goroutine.
func (n *Node) Fire() {
	if n.state.CompareAndSwap(pending, fired) {
		n.target.LockLost()
	}
}

// FireLater fires n in a goroutine of its own: for a registration on a
// lock that is lost already, whose caller may hold a mutex the target
// takes.
func (n *Node) FireLater() { go n.Fire() }

// List is the nodes registered on one lock. It is not safe for concurrent
// use: the lock's owner guards it with its mutex. Its zero value is empty.
// It is one pointer, its length kept in its head node: every lock the
// memory store holds carries one, and one more word would move the lock
// from the 80-byte allocation size class to 96.
type List struct {
	head *Node
}

// Push adds n. Now and then it drops the nodes stopped meanwhile, so that a
// long-held lock watched and unwatched many times keeps at most about twice
// its live nodes.
func (l *List) Push(n *Node) {
	if k := l.Len(); k >= 16 && k&(k-1) == 0 {
		l.prune()
	}
	n.next = l.head
	n.depth = uint32(l.Len()) + 1
	l.head = n
}

func (l *List) prune() {
	var head *Node
	var k uint32
	for n := l.head; n != nil; {
		next := n.next
		if n.state.Load() == pending {
			k++
			n.next, n.depth = head, k
			head = n
		} else {
			n.next, n.depth = nil, 0
		}
		n = next
	}
	l.head = head
}

// Len returns the number of nodes in the list, stopped ones included.
func (l *List) Len() int {
	if l.head == nil {
		return 0
	}
	return int(l.head.depth)
}

// Take empties the list and returns its nodes, for Fire once the owner's
// mutex is released, or to drop when the lock is released.
func (l *List) Take() Chain {
	c := Chain{l.head}
	*l = List{}
	return c
}

// Chain is the nodes taken from a List.
type Chain struct{ head *Node }

// Fire fires every node of c, in the caller's goroutine, in no order the
// caller may rely on (a prune reverses part of the list). The caller must
// hold no mutex a target may take.
func (c Chain) Fire() {
	for n := c.head; n != nil; {
		next := n.next
		n.next, n.depth = nil, 0
		n.Fire()
		n = next
	}
}
