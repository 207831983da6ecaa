package uniqueness

import (
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"sync"
	"sync/atomic"
	"time"

	"github.com/claimbus/claimbus/internal/afterlost"
	"github.com/claimbus/claimbus/internal/keyqueue"
	"github.com/claimbus/claimbus/internal/lockext"
	"github.com/claimbus/claimbus/internal/observe"
	"github.com/claimbus/claimbus/lockstore"
	"github.com/claimbus/claimbus/middleware"
)

// numShards is the number of independently locked parts of a claimer's
// table of keys, so that claims on distinct keys rarely share a mutex.
const numShards = 64

// claimer claims values (an email, a username) on any lockstore.Locker:
// Claim takes the key, runs a lookup
// while holding it, and hands the caller the claim when the value is free.
//
// In front of the Locker, a claimer keeps a small table of the keys that
// claimants of this process are waiting for or holding. It is what lets a
// claimant that finds the value taken fail every claimant queued behind it
// in this process at once, without each running its own lookup. An entry
// lives only while someone waits for or holds its key.
//
// A claimer is safe for concurrent use. Claimants on other nodes are kept
// apart by the Locker (for instance the PostgreSQL store); they run their
// own lookups.
type claimer struct {
	locker lockstore.Locker
	// prober is locker when it can answer a probe in the lock's round
	// trip, nil otherwise.
	prober lockext.Prober[lockstore.Key, lockstore.Lock]
	seed   maphash.Seed
	shards [numShards]shard
}

// shard is one part of the table of keys, padded so that two shards'
// mutexes never share a cache line. Its table gives an idle key's memory
// back (see keyqueue.Table).
type shard struct {
	mu   sync.Mutex
	keys keyqueue.Table[lockstore.Key, keyState, *keyState]
	_    [64]byte
}

// keyState is what a claimer knows about one key while claimants of this
// process wait for it or hold it.
type keyState struct {
	// key and hash are the key's and its hash (see claimer.hash).
	key  lockstore.Key
	hash uint64
	// refs counts the claimants between entering Claim and leaving it with
	// an error, or releasing their claim. The entry goes at zero.
	refs int
	// waiting counts the claimants waiting for the Locker to grant the key.
	waiting int
	// gen grows each time the key settles as taken: a claimant that entered
	// under an older generation fails with middleware.ErrAlreadyTaken when granted.
	gen uint64
	// settled is done when generation gen settles; waiters that have a
	// claimant of this process ahead of them wait with it, so that a settle
	// ends their wait at once. Nil until such a waiter needs it.
	settled context.Context
	cancel  context.CancelFunc
	// holder is the claim of this process granted the key last, until its
	// release. Found still set when the next claimant is granted, it is a
	// claim whose lock was lost.
	holder *hold
}

// TableKey is the key of the state in its shard's table.
func (st *keyState) TableKey() lockstore.Key { return st.key }

// makeClaimer returns a claimer that takes keys on l.
func makeClaimer(l lockstore.Locker) *claimer {
	p, _ := l.(lockext.Prober[lockstore.Key, lockstore.Lock])
	return &claimer{locker: l, prober: p, seed: maphash.MakeSeed()}
}

// hold is one claimant's hold on a key: the value was free when its lookup
// ran, and nobody else can claim it until Release.
type hold struct {
	claimer *claimer
	sh      *shard
	st      *keyState
	key     lockstore.Key
	lock    lockstore.Lock
	taken   lookuper
	done    atomic.Bool
	// lost is set once a release found the lock lost, so that later calls
	// of Release report it too.
	lost atomic.Bool
	// onLost, guarded by sh.mu, is called once, with an error matching
	// lockstore.ErrLockLost, if the lock is lost before the claim is released (see
	// claimer.watchLost).
	onLost context.CancelCauseFunc
	// lostSeen, guarded by sh.mu, is set once the loss of the lock was
	// reported; watched, once watchLost registered lostWatch.
	lostSeen, watched bool
	// lostWatch is the claim's registration with its lock (see
	// lockstore.AfterLost), from watchLost to its release.
	lostWatch afterlost.Node
}

// Claim takes key on the claimer's Locker, waiting first come first served
// behind the claimants ahead of it, then runs taken while holding the key:
//   - taken reports true: Claim gives the key up and returns
//     middleware.ErrAlreadyTaken (on a store that carries the unlock in a
//     later round trip, the PostgreSQL store, without waiting for it: the
//     key may stay held for a millisecond more), and every claimant
//     queued behind this one in this process fails with
//     middleware.ErrAlreadyTaken too, without running its lookup;
//   - taken reports false: the caller holds the claim until its Release;
//   - taken fails or panics: the key is released and Claim returns a
//     wrapped error (a *middleware.PanicError for a panic) that is not
//     middleware.ErrAlreadyTaken; the next claimant runs its own lookup.
//
// A claimant queued behind one that settles the key as taken (at its claim
// or at its Release) fails with middleware.ErrAlreadyTaken as soon as it settles.
//
// ctx bounds the wait and the lookup; it never bounds the holding. When it
// ends during the wait, Claim returns its error and leaves no trace. For
// what the lookup must read, see uniqueness/README.md.
func (c *claimer) Claim(ctx context.Context, key lockstore.Key, taken func(context.Context) (bool, error)) (*hold, error) {
	if taken == nil {
		return nil, errNilLookup
	}
	return c.claim(ctx, key, lookupFunc(taken), 0, observe.TracerFromContext(ctx))
}

// lookuper is a claim's lookup: a function, or a value that the
// middleware has allocated anyway.
type lookuper interface {
	taken(ctx context.Context) (bool, error)
}

// lookupFunc is a lookup function as a lookuper.
type lookupFunc func(context.Context) (bool, error)

func (f lookupFunc) taken(ctx context.Context) (bool, error) { return f(ctx) }

// claim is Claim with the wait for the key also bounded by wait, when it
// is positive, and the lock's acquisition reported to tr, when not nil.
// The bound costs a timer only when the key is not free at once.
func (c *claimer) claim(ctx context.Context, key lockstore.Key, taken lookuper, wait time.Duration, tr observe.Tracer) (*hold, error) {
	if c == nil || c.locker == nil {
		return nil, errNilLocker
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("uniqueness: claim %s: %w", key, err)
	}

	h := c.hash(key)
	sh := c.shardOf(h)
	sh.mu.Lock()
	st := sh.keys.Get(h, key)
	if st == nil {
		st = &keyState{key: key, hash: h}
		sh.keys.Put(h, st)
	}
	st.refs++
	st.waiting++
	gen := st.gen
	var settled context.Context
	if st.refs > 1 {
		// Another claimant of this process is ahead: wait so that its
		// settling the key as taken ends this wait.
		if st.settled == nil {
			st.settled, st.cancel = context.WithCancel(context.Background())
		}
		settled = st.settled
	}
	sh.mu.Unlock()

	lctx, end := observe.StartStepOn(ctx, tr, observe.StepLock, key.Namespace)
	lk, err := c.lock(lctx, key, settled, wait, taken)
	end(err)
	if err != nil {
		sh.mu.Lock()
		st.waiting--
		sh.leave(st)
		sh.mu.Unlock()
		if settled != nil && settled.Err() != nil && ctx.Err() == nil && errors.Is(err, context.Canceled) {
			return nil, middleware.ErrAlreadyTaken
		}
		return nil, fmt.Errorf("uniqueness: claim %s: %w", key, err)
	}
	cl := &hold{claimer: c, sh: sh, st: st, key: key, lock: lk, taken: taken}

	sh.mu.Lock()
	st.waiting--
	var lostFunc func()
	if prev := st.holder; prev != nil {
		// The previous holder never released: its lock was lost.
		lostFunc = prev.takeLost()
	}
	// Settled as taken while this claimant waited: it was granted before it
	// saw the settle.
	stale := st.gen != gen
	if stale {
		st.holder = nil
		sh.leave(st)
	} else {
		st.holder = cl
	}
	sh.mu.Unlock()
	if lostFunc != nil {
		lostFunc()
	}
	if stale {
		if rerr := cl.releaseLock(context.WithoutCancel(ctx)); rerr != nil {
			return nil, errors.Join(middleware.ErrAlreadyTaken, rerr)
		}
		return nil, middleware.ErrAlreadyTaken
	}

	isTaken, lerr := lookup(ctx, taken)
	switch {
	case lerr != nil:
		rerr := cl.release(context.WithoutCancel(ctx), false)
		return nil, errors.Join(fmt.Errorf("uniqueness: lookup for %s: %w", key, lerr), rerr)
	case isTaken:
		return nil, cl.releaseTaken(context.WithoutCancel(ctx))
	}
	return cl, nil
}

// releaseTaken settles the key as taken and gives up the lock of a claim
// whose lookup found the value, and returns middleware.ErrAlreadyTaken.
// Nothing was written under the lock, so the answer does not wait for the
// store to confirm the unlock when it can leave it to later
// (lockext.LaterReleaser: the PostgreSQL store carries it in its next
// round trip, within a millisecond); the unlock's outcome, a lost lock
// included, changes nothing, so it is not reported.
func (cl *hold) releaseTaken(ctx context.Context) error {
	cl.sh.mu.Lock()
	cl.st.settle()
	cl.forget()
	cl.sh.mu.Unlock()
	if lr, ok := cl.lock.(lockext.LaterReleaser); ok {
		lr.ReleaseLater(func(error) {})
		return middleware.ErrAlreadyTaken
	}
	if rerr := cl.releaseLock(ctx); rerr != nil {
		return errors.Join(middleware.ErrAlreadyTaken, rerr)
	}
	return middleware.ErrAlreadyTaken
}

// hash returns the hash of key: of its id alone, which tells keys apart
// well enough (a namespace holds many ids; the table compares whole keys).
func (c *claimer) hash(key lockstore.Key) uint64 {
	return maphash.String(c.seed, key.ID)
}

// shardOf returns the shard that keeps the key of hash h, picked by the
// high bits of h; the low bits place the key in the shard's table.
func (c *claimer) shardOf(h uint64) *shard {
	return &c.shards[h>>58%numShards]
}

// lock takes key, waiting with ctx and, when positive, for at most wait; a
// non-nil settled ends the wait too. When the key is free at once and
// taken can be answered in the lock's round trip (a prober on a
// lockext.Prober), it is, and taken is told the answer.
func (c *claimer) lock(ctx context.Context, key lockstore.Key, settled context.Context, wait time.Duration, taken lookuper) (lockstore.Lock, error) {
	if wait > 0 {
		if settled == nil {
			// Nobody of this process is ahead, so the key is likely free:
			// try it before paying for a timer.
			if lk, err := c.tryLock(ctx, key, taken); !errors.Is(err, lockstore.ErrLocked) {
				return lk, err
			}
		}
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, wait)
		defer cancel()
	}
	if settled == nil {
		return c.locker.Lock(ctx, key)
	}
	wctx, cancel := context.WithCancel(ctx)
	stop := context.AfterFunc(settled, cancel)
	lk, err := c.locker.Lock(wctx, key)
	stop()
	cancel()
	return lk, err
}

// prober is a lookuper that a lockext.Prober can answer in the round
// trip that takes the key: probe says what to run, when it can, and probed
// is told the answer, which its next taken then uses.
type prober interface {
	probe() (lockext.Probe, bool)
	probed(found lockext.Found)
}

// tryLock is the Locker's TryLock, with taken's probe when it has one and
// the Locker is a lockext.Prober.
func (c *claimer) tryLock(ctx context.Context, key lockstore.Key, taken lookuper) (lockstore.Lock, error) {
	pr, ok := taken.(prober)
	if !ok || c.prober == nil {
		return c.locker.TryLock(ctx, key)
	}
	probe, ok := pr.probe()
	if !ok {
		return c.locker.TryLock(ctx, key)
	}
	lk, found, err := c.prober.TryLockProbe(ctx, key, probe)
	if err == nil {
		pr.probed(found)
	}
	return lk, err
}

// leave forgets one claimant of st's key; the entry goes when it was the
// last. sh.mu is held.
func (sh *shard) leave(st *keyState) {
	st.refs--
	if st.refs > 0 {
		return
	}
	sh.keys.Delete(st.hash, st.key)
	if st.cancel != nil {
		st.cancel()
	}
}

// len returns the number of keys the claimer keeps now: those that
// claimants of this process wait for or hold.
func (c *claimer) len() int {
	n := 0
	for i := range c.shards {
		sh := &c.shards[i]
		sh.mu.Lock()
		n += sh.keys.Len()
		sh.mu.Unlock()
	}
	return n
}

// waiting returns the number of claimants of this process waiting for key.
func (c *claimer) waiting(key lockstore.Key) int {
	h := c.hash(key)
	sh := c.shardOf(h)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if st := sh.keys.Get(h, key); st != nil {
		return st.waiting
	}
	return 0
}

// settle marks key as taken for every claimant that entered before now.
// sh.mu is held.
func (st *keyState) settle() {
	st.gen++
	if st.cancel != nil {
		st.cancel()
		st.settled, st.cancel = nil, nil
	}
}

// lookup runs taken, turning a panic into a *middleware.PanicError.
func lookup(ctx context.Context, taken lookuper) (isTaken bool, err error) {
	if perr := middleware.Recover("lookup", func() { isTaken, err = taken.taken(ctx) }); perr != nil {
		return false, perr
	}
	return isTaken, err
}

// Release gives the claim up. When claimants of this process are waiting
// for the key, it first runs the lookup again: if the value now exists,
// each of them fails at once with middleware.ErrAlreadyTaken; otherwise, or when the
// re-check fails, the next one takes its turn and runs its own lookup. With
// nobody waiting here the re-check is skipped (a claimant arriving later
// runs its own lookup), which keeps an uncontended claim at one lookup.
//
// Release always gives the key up. It returns the error of a failed
// re-check or of the Locker's release, wrapped, for logging; the claim is
// released all the same. The Locker's error matches lockstore.ErrLockLost
// when the lock under the claim was lost before the release (Lost is
// closed) or its unlock went unconfirmed: the holder's write may then have
// overlapped another claimant's. It is idempotent, as lockstore.Lock's
// Release is: after a release that found the lock lost, later calls return
// an error matching lockstore.ErrLockLost too; otherwise they return nil.
//
// The holder must have committed its write before calling Release: a
// re-check that cannot see the write lets the next claimant in.
func (cl *hold) Release(ctx context.Context) error {
	err, _ := cl.releaseWith(ctx, nil)
	return err
}

// releasesLater reports whether an uncontended release of the claim can
// leave the store's answer to later (see releaseWith).
func (cl *hold) releasesLater() bool {
	_, ok := cl.lock.(lockext.LaterReleaser)
	return ok
}

// releaseWith is Release. With later set, an uncontended release of a lock
// that is a lockext.LaterReleaser does not wait for the store to confirm
// it: releaseWith reports async, and later gets the result, in the store's
// goroutine (it must be quick). The claim is forgotten before releaseWith
// returns either way.
func (cl *hold) releaseWith(ctx context.Context, later func(error)) (err error, async bool) {
	if cl == nil {
		return nil, false
	}
	if !cl.done.CompareAndSwap(false, true) {
		if cl.lost.Load() {
			return fmt.Errorf("uniqueness: release %s again: %w", cl.key, lockstore.ErrLockLost), false
		}
		return nil, false
	}
	cl.sh.mu.Lock()
	if cl.st.waiting == 0 {
		cl.forget()
		cl.sh.mu.Unlock()
		if lr, ok := cl.lock.(lockext.LaterReleaser); ok && later != nil {
			lr.ReleaseLater(func(err error) { later(cl.lockErr(err)) })
			return nil, true
		}
		return cl.releaseLock(ctx), false
	}
	cl.sh.mu.Unlock()
	isTaken, err := lookup(ctx, cl.taken)
	if err != nil {
		isTaken = false
		err = fmt.Errorf("uniqueness: re-check of %s on release (the next claimant runs its own lookup): %w", cl.key, err)
	}
	return errors.Join(err, cl.release(ctx, isTaken)), false
}

// release forgets the claim, settling the key as taken first when
// settleTaken is set, then releases the lock. It runs once per claim:
// after Release's check of done, or in claim for a claim never handed out.
func (cl *hold) release(ctx context.Context, settleTaken bool) error {
	cl.sh.mu.Lock()
	if settleTaken {
		cl.st.settle()
	}
	cl.forget()
	cl.sh.mu.Unlock()
	return cl.releaseLock(ctx)
}

// forget removes the claim from its key's state. cl.sh.mu is held.
func (cl *hold) forget() {
	if cl.st.holder == cl {
		cl.st.holder = nil
	}
	cl.unwatch()
	cl.sh.leave(cl.st)
	cl.st = nil
}

// releaseLock releases the lock under the claim.
func (cl *hold) releaseLock(ctx context.Context) error {
	return cl.lockErr(cl.lock.Release(ctx))
}

// lockErr is the error of a claim whose lock's release returned err,
// recording a lost lock.
func (cl *hold) lockErr(err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, lockstore.ErrLockLost) {
		cl.lost.Store(true)
	}
	return fmt.Errorf("uniqueness: release %s: %w", cl.key, err)
}

// Key is the key this claim holds.
func (cl *hold) Key() lockstore.Key { return cl.key }

// Token is the fencing token of the lock under the claim (see
// lockstore.Lock.Token).
func (cl *hold) Token() int64 { return cl.lock.Token() }

// Lost is closed when the lock under the claim ends for any reason other
// than Release: a lease that ran out, a lost connection, a store reset or
// closed. The holder should stop writing; the next claimant takes its turn.
func (cl *hold) Lost() <-chan struct{} { return cl.lock.Lost() }
