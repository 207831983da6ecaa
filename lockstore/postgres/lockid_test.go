package postgres

import (
	"hash/fnv"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/claimbus/claimbus/internal/lockext"
	"github.com/claimbus/claimbus/lockstore"
)

// The golden lock ids below were computed once with hash/fnv (New32a), an
// implementation independent of fnv1a32, and are pinned: every build of
// claimbus must map these keys to these numbers, or nodes of different
// versions would not exclude each other. Never change them.
func TestLockIDGolden(t *testing.T) {
	t.Parallel()
	s := &Store{namespaces: map[string]int32{"lobby": 1, "group": 2, "party": 3}}
	tests := []struct {
		key  lockstore.Key
		want LockID
	}{
		{lockstore.Key{Namespace: "lobby", ID: "42"}, LockID{1, 132351363}},
		{lockstore.Key{Namespace: "party", ID: "a"}, LockID{3, 1678518572}},
		{lockstore.Key{Namespace: "staff.email", ID: "ann@x.org"}, LockID{681361299, 1406021056}},
		{lockstore.Key{Namespace: "word_guessed", ID: "lobby"}, LockID{2007154230, 475664083}},
		{lockstore.Key{Namespace: "transfer", ID: "foobar"}, LockID{1652916302, 1067252072}},
		{lockstore.Key{Namespace: "a", ID: "Zoë/ø"}, LockID{1678518772, 1077207218}},
		// "lobby" registered maps to 1; an unregistered namespace that
		// merely looks alike is hashed.
		{lockstore.Key{Namespace: "Lobby", ID: "42"}, LockID{hashNamespace("Lobby"), 132351363}},
	}
	for _, tt := range tests {
		got, err := s.lockID(tt.key)
		require.NoError(t, err, tt.key)
		require.Equal(t, tt.want, got, tt.key)
	}
}

// TestFNV1a32Spec checks fnv1a32 against the test vectors of the FNV
// specification (draft-eastlake-fnv, FNV-1a 32): "" → 0x811c9dc5,
// "a" → 0xe40c292c, "foobar" → 0xbf9cf968. By hand for "a":
// (0x811c9dc5 ^ 0x61) * 16777619 mod 2^32 = 0x811c9da4 * 0x01000193 mod 2^32
// = 0xe40c292c.
func TestFNV1a32Spec(t *testing.T) {
	t.Parallel()
	require.Equal(t, uint32(0x811c9dc5), fnv1a32(""))
	require.Equal(t, uint32(0xe40c292c), fnv1a32("a"))
	require.Equal(t, uint32(0xbf9cf968), fnv1a32("foobar"))
	x := uint32(0x811c9dc5 ^ 0x61)
	require.Equal(t, uint32(0x811c9da4), x)
	x *= 0x01000193 // 16777619, mod 2^32
	require.Equal(t, x, fnv1a32("a"))
}

func FuzzFNV1a32MatchesHashFNV(f *testing.F) {
	for _, s := range []string{"", "a", "staff.email", "Zoë/ø", "\xff\x00"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		h := fnv.New32a()
		_, _ = h.Write([]byte(s))
		want := h.Sum32()
		require.Equal(t, want, fnv1a32(s))
		ns := hashNamespace(s)
		require.GreaterOrEqual(t, ns, int32(firstHashedNamespace))
		require.Equal(t, int32(100+want%(1<<31-100)), ns)
		require.Equal(t, int32(want&0x7fffffff), hashID(s))
		require.GreaterOrEqual(t, hashID(s), int32(0))
	})
}

func TestLockIDInvalidKey(t *testing.T) {
	t.Parallel()
	s := &Store{}
	for _, k := range []lockstore.Key{
		{Namespace: "", ID: "x"},
		{Namespace: "ns", ID: ""},
		{Namespace: string(make([]byte, lockstore.MaxNamespaceLen+1)), ID: "x"},
		{Namespace: "ns", ID: string(make([]byte, lockstore.MaxIDLen+1))},
		{Namespace: "ns", ID: "\xff"},
	} {
		_, err := s.lockID(k)
		require.ErrorIs(t, err, lockstore.ErrInvalidKey)
	}
}

func TestCompareKeys(t *testing.T) {
	t.Parallel()
	s := &Store{namespaces: map[string]int32{"lobby": 1, "group": 2}}
	lobby := lockstore.Key{Namespace: "lobby", ID: "42"}
	group := lockstore.Key{Namespace: "group", ID: "42"}
	hashed := lockstore.Key{Namespace: "staff.email", ID: "a"}
	// Registered numbers come before every hashed namespace, and order by
	// number, not by name ("group" < "lobby" by name, 2 > 1 by number).
	require.Negative(t, s.CompareKeys(lobby, group))
	require.Positive(t, s.CompareKeys(group, lobby))
	require.Negative(t, s.CompareKeys(group, hashed))
	require.Zero(t, s.CompareKeys(lobby, lobby))

	// Within a namespace, by id number: hashID("42") = 132351363 <
	// hashID("a") = 1678518572.
	require.Negative(t, s.CompareKeys(lockstore.Key{Namespace: "lobby", ID: "42"}, lockstore.Key{Namespace: "lobby", ID: "a"}))

	// SortKeys uses it, and drops a key repeated.
	keys := lockext.SortKeys(s, []lockstore.Key{hashed, lobby, group, lobby})
	require.Equal(t, []lockstore.Key{lobby, group, hashed}, keys)
}

func TestCompareKeysCollision(t *testing.T) {
	t.Parallel()
	// Two distinct ids with one FNV-1a hash, found by search: they share a
	// lock id, so they compare equal and SortKeys keeps one of them.
	a, b := collidingIDs(t)
	s := &Store{}
	ka := lockstore.Key{Namespace: "ns", ID: a}
	kb := lockstore.Key{Namespace: "ns", ID: b}
	require.NotEqual(t, ka, kb)
	require.Zero(t, s.CompareKeys(ka, kb))
	require.Len(t, lockext.SortKeys(s, []lockstore.Key{ka, kb}), 1)
}

// collidingIDs finds two short distinct ids whose 31-bit id hashes are
// equal (a birthday search over a few hundred thousand strings).
func collidingIDs(t *testing.T) (string, string) {
	t.Helper()
	seen := make(map[int32]string, 1<<18)
	for i := 0; i < 1<<22; i++ {
		id := "k" + itoa(i)
		h := hashID(id)
		if prev, ok := seen[h]; ok {
			return prev, id
		}
		seen[h] = id
	}
	t.Fatal("no collision found")
	return "", ""
}

func itoa(i int) string {
	var b [20]byte
	n := len(b)
	for {
		n--
		b[n] = byte('0' + i%10)
		i /= 10
		if i == 0 {
			return string(b[n:])
		}
	}
}
