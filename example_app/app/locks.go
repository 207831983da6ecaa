package app

import (
	"context"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/claimbus/claimbus/lockstore"
	"github.com/claimbus/claimbus/lockstore/postgres"
)

// HeldLock is one entry of GET /locks: a lock or claim held now.
type HeldLock struct {
	// Namespace and ID are the key. For a lock of another node on
	// PostgreSQL only its lock id is known: the namespace's registered
	// name (or its number) and the id's number, in decimal.
	Namespace string `json:"namespace"`
	ID        string `json:"id"`
	// Token is the fencing token of the grant, 0 when unknown.
	Token int64 `json:"token"`
	// Since is when the grant was made, nil when unknown.
	Since *time.Time `json:"since"`
	// Node names the holder: a node's name (its application_name on
	// PostgreSQL).
	Node string `json:"node"`
}

// Locks lists the locks and claims held now by every node sharing the
// node's database, in the app's namespaces (PostgreSQL lists every
// advisory lock of the database, other programs' too: those are left
// out); with key non-nil, only the holder of key (at most one entry),
// wherever it runs.
func (n *Node) Locks(ctx context.Context, key *lockstore.Key) ([]HeldLock, error) {
	hs, err := n.backend.held(ctx)
	if err != nil {
		return nil, n.dbError(ctx, err)
	}
	ours := Namespaces()
	out := []HeldLock{}
	for _, h := range hs {
		if key != nil && !n.backend.holds(h, *key) {
			continue
		}
		if _, ok := ours[h.Key.Namespace]; key == nil && !ok {
			continue
		}
		l := HeldLock{Namespace: h.Key.Namespace, ID: h.Key.ID, Token: h.Token, Node: h.Node}
		if !h.AcquiredAt.IsZero() {
			at := h.AcquiredAt.UTC()
			l.Since = &at
		}
		out = append(out, l)
		if key != nil {
			break
		}
	}
	return out, nil
}

// locks serves GET /locks and GET /locks?namespace=N&id=V.
func (n *Node) locks(w http.ResponseWriter, r *http.Request) {
	q, err := url.ParseQuery(r.URL.RawQuery)
	var msg string
	var key *lockstore.Key
	switch {
	case err != nil:
		msg = "the query is not one: a % escape is broken"
	case len(q["namespace"]) > 1 || len(q["id"]) > 1:
		msg = "give one namespace and one id"
	case len(q) > btoi(q.Has("namespace"))+btoi(q.Has("id")):
		msg = "unknown query parameter: the only ones are namespace and id"
	case q.Has("namespace") != q.Has("id"):
		msg = "give both namespace and id, or neither: /locks?namespace=staff.email&id=ann@example.org"
	case q.Has("namespace"):
		k := lockstore.Key{Namespace: q.Get("namespace"), ID: q.Get("id")}
		if err := k.Validate(); err != nil {
			msg = "the namespace and id are not a key: each 1 to " + strconv.Itoa(lockstore.MaxNamespaceLen) +
				" (namespace) or " + strconv.Itoa(lockstore.MaxIDLen) + " (id) bytes of UTF-8"
		}
		key = &k
	}
	if msg != "" {
		writeError(w, http.StatusBadRequest, CodeBadRequest, "", msg)
		return
	}
	n.answer(w, r, http.StatusOK, func(ctx context.Context) (any, error) { return n.Locks(ctx, key) })
}

// btoi is 1 for true, 0 for false.
func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// holds for SQLite: one node, every key in full.
func (sqliteBackend) holds(h lockstore.Holder, k lockstore.Key) bool { return h.Key == k }

func (b sqliteBackend) held(ctx context.Context) ([]lockstore.Holder, error) {
	return b.store.Held(ctx)
}

func (b pgBackend) held(ctx context.Context) ([]lockstore.Holder, error) {
	return b.store.Held(ctx)
}

// holds for PostgreSQL: this store's own locks carry their key; the others
// only their lock id, the namespace's registered name or number and the
// id's number, matched against k's lock id.
func (b pgBackend) holds(h lockstore.Holder, k lockstore.Key) bool {
	if h.Key == k {
		return true
	}
	if h.Token != 0 {
		return false // one of this store's, with its own key
	}
	want, err := b.store.LockID(k)
	if err != nil {
		return false
	}
	ns, ok := Namespaces()[h.Key.Namespace]
	if !ok {
		v, err := strconv.ParseInt(h.Key.Namespace, 10, 32)
		if err != nil {
			return false
		}
		ns = int32(v)
	}
	id, err := strconv.ParseInt(h.Key.ID, 10, 32)
	return err == nil && (postgres.LockID{Namespace: ns, ID: int32(id)}) == want
}
