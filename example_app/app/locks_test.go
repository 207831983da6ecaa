package app_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/claimbus/claimbus/example_app/app"
	"github.com/claimbus/claimbus/internal/pgtest"
	"github.com/claimbus/claimbus/lockstore"
)

// getLocks answers GET /locks with query q ("" for none), requiring 200.
func getLocks(t *testing.T, base, q string) []app.HeldLock {
	t.Helper()
	r := send(t, "GET", base+"/locks"+q, "")
	require.Equal(t, http.StatusOK, r.status, "%s", r.raw)
	var ls []app.HeldLock
	require.NoError(t, json.Unmarshal(r.raw, &ls), "%s", r.raw)
	require.NotNil(t, ls, "an array, [] when empty: %s", r.raw)
	return ls
}

// GET /locks lists the locks held now, each with its key, token, since and
// node; with namespace and id, the holder of that key alone.
func TestLocks(t *testing.T) {
	t.Parallel()
	onEachBackend(t, app.Config{}, func(t *testing.T, node *app.Node, base string) {
		require.Empty(t, getLocks(t, base, ""))
		key := lockstore.Key{Namespace: app.NamespaceStaffEmail, ID: "ann@example.org"}
		l, err := node.Backend().Locker().TryLock(context.Background(), key)
		require.NoError(t, err)

		all := getLocks(t, base, "")
		require.Len(t, all, 1)
		require.Equal(t, key.Namespace, all[0].Namespace)
		require.Equal(t, key.ID, all[0].ID)
		require.Equal(t, l.Token(), all[0].Token)
		require.NotZero(t, all[0].Token)
		require.NotNil(t, all[0].Since)
		require.WithinDuration(t, time.Now(), *all[0].Since, time.Minute)
		require.NotEmpty(t, all[0].Node)

		one := getLocks(t, base, "?namespace=staff.email&id="+url.QueryEscape("ann@example.org"))
		require.Equal(t, all, one)
		require.Empty(t, getLocks(t, base, "?namespace=staff.email&id=bob@example.org"))
		require.Empty(t, getLocks(t, base, "?namespace=transfer&id=ann@example.org"))

		require.NoError(t, l.Release(context.Background()))
		require.Empty(t, getLocks(t, base, "?namespace=staff.email&id=ann@example.org"))
		require.Empty(t, getLocks(t, base, ""))
	})
}

// A bad or half-given pair is 400 bad_request.
func TestLocksBadQuery(t *testing.T) {
	t.Parallel()
	_, _, base := sqliteNode(t, app.Config{})
	for _, q := range []string{
		"?namespace=staff.email",
		"?id=ann@example.org",
		"?namespace=&id=x",
		"?namespace=staff.email&id=",
		"?namespace=a&namespace=b&id=x",
		"?namespace=a&id=x&id=y",
		"?namespace=a&id=x&node=n",
		"?node=n",
		"?namespace=a&id=%zz",
		"?namespace=a&id=%ff",
	} {
		r := send(t, "GET", base+"/locks"+q, "")
		require.Equal(t, http.StatusBadRequest, r.status, "%s: %s", q, r.raw)
		require.Equal(t, "bad_request", r.body["code"], q)
	}
}

// On PostgreSQL, GET /locks on one node lists the locks of another by lock
// id and node name, and the query by key finds the other node's holder.
func TestLocksOtherNode(t *testing.T) {
	t.Parallel()
	dsn := pgtest.DSN(t)
	a, _ := pgNode(t, dsn, "pg-a", "inprocess", app.Config{})
	_, bURL := pgNode(t, dsn, "pg-b", "inprocess", app.Config{})
	key := lockstore.Key{Namespace: app.NamespaceStaffEmail, ID: "ann@example.org"}
	l, err := a.Backend().Locker().TryLock(context.Background(), key)
	require.NoError(t, err)

	all := getLocks(t, bURL, "")
	require.Len(t, all, 1)
	require.Equal(t, "pg-a", all[0].Node)
	require.Equal(t, app.NamespaceStaffEmail, all[0].Namespace, "a registered namespace by name")
	require.Zero(t, all[0].Token)
	require.Nil(t, all[0].Since)

	one := getLocks(t, bURL, "?namespace=staff.email&id=ann@example.org")
	require.Equal(t, all, one)
	require.Empty(t, getLocks(t, bURL, "?namespace=staff.email&id=bob@example.org"))

	// An unregistered namespace is matched by its hashed number.
	other := lockstore.Key{Namespace: "some.thing", ID: "x-1"}
	lo, err := a.Backend().Locker().TryLock(context.Background(), other)
	require.NoError(t, err)
	one = getLocks(t, bURL, "?namespace=some.thing&id=x-1")
	require.Len(t, one, 1)
	require.Equal(t, "pg-a", one[0].Node)
	// The list shows the app's namespaces only: an advisory lock of
	// another program on the database is not the API's to show.
	require.Len(t, getLocks(t, bURL, ""), 1, "the list is the app's own")

	require.NoError(t, lo.Release(context.Background()))
	require.NoError(t, l.Release(context.Background()))
	require.Empty(t, getLocks(t, bURL, ""))
}
