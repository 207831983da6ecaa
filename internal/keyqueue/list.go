package keyqueue

// Waiter is one waiter of a List, carrying its payload in Value. The List
// links waiters through it, so queuing one allocates nothing more.
type Waiter[T any] struct {
	Value      T
	prev, next *Waiter[T]
}

// List is the FIFO of one key's waiters, doubly linked so that a waiter
// that gives up leaves in constant time. Its zero value is empty. It is not
// safe for concurrent use. A List may be moved (copied, then the original
// dropped) as a whole: its waiters link to each other, not to it.
type List[T any] struct {
	head, tail *Waiter[T]
	n          int
}

// Push adds w, which is in no list, at the back.
func (q *List[T]) Push(w *Waiter[T]) {
	w.prev = q.tail
	if q.tail == nil {
		q.head = w
	} else {
		q.tail.next = w
	}
	q.tail = w
	q.n++
}

// Pop removes the first waiter and returns it; nil when the list is empty.
func (q *List[T]) Pop() *Waiter[T] {
	w := q.head
	if w != nil {
		q.Remove(w)
	}
	return w
}

// Remove removes w, which is in q.
func (q *List[T]) Remove(w *Waiter[T]) {
	if w.prev == nil {
		q.head = w.next
	} else {
		w.prev.next = w.next
	}
	if w.next == nil {
		q.tail = w.prev
	} else {
		w.next.prev = w.prev
	}
	w.prev, w.next = nil, nil
	q.n--
}

// Len returns the number of waiters in q.
func (q *List[T]) Len() int { return q.n }

// All yields the waiters first to last. q must not change meanwhile.
func (q *List[T]) All(yield func(*Waiter[T]) bool) {
	for w := q.head; w != nil; w = w.next {
		if !yield(w) {
			return
		}
	}
}
