package app_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/claimbus/claimbus/example_app/app"
)

// The fuzz targets send what a client could to every decoder of the API:
// each body route, the path ids, the staff query. Whatever comes in, the
// answer is JSON, never a 5xx, and never tells of the implementation. Run
// one with make fuzz, or go test -run '^$' -fuzz '^FuzzStaffBody$' -fuzztime 1m ./example_app/app/.

// fuzzAPI is the API of a node on a fresh SQLite database, with seed's data.
func fuzzAPI(f *testing.F) http.Handler {
	f.Helper()
	node, _, url := sqliteNode(f, app.Config{})
	for _, s := range []struct{ path, body string }{
		{"/wallets", `{"wallet_id":"alice","currency":"EUR","balance":10000}`},
		{"/wallets", `{"wallet_id":"bob","currency":"EUR","balance":0}`},
		{"/transfers", `{"transfer_id":"t-1","from_wallet_id":"alice","to_wallet_id":"bob","amount":100,"currency":"EUR"}`},
		{"/lobbies", `{"lobby_id":"l-1","words":["apple","river"]}`},
	} {
		resp, err := http.Post(url+s.path, "application/json", strings.NewReader(s.body))
		if err != nil {
			f.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusCreated {
			f.Fatalf("seed %s: %d", s.path, resp.StatusCode)
		}
	}
	f.Cleanup(http.DefaultClient.CloseIdleConnections)
	return node.Handler()
}

// requireSafeAnswer fails t unless rec holds a JSON answer below 500 and,
// when it is a failure, one that tells nothing of the implementation (a
// success echoes the data stored, which may look like anything).
func requireSafeAnswer(t *testing.T, rec *httptest.ResponseRecorder, what string) {
	t.Helper()
	if rec.Code >= 500 {
		t.Fatalf("%s: %d %q", what, rec.Code, rec.Body.Bytes())
	}
	if ct := rec.Header().Get("Content-Type"); ct != "application/json" {
		t.Fatalf("%s: Content-Type %q", what, ct)
	}
	if !json.Valid(rec.Body.Bytes()) {
		t.Fatalf("%s: not JSON: %q", what, rec.Body.Bytes())
	}
	if rec.Code >= 400 {
		requireNoInternals(t, rec.Body.Bytes(), what)
	}
}

// fuzzBody fuzzes the body of method path: the seeds are the bodies of
// badInputs sent there, and good.
func fuzzBody(f *testing.F, method, path string, good ...string) {
	for _, in := range badInputs {
		if in.method == method && in.path == path {
			f.Add([]byte(in.body))
		}
	}
	for _, s := range good {
		f.Add([]byte(s))
	}
	for _, s := range []string{"", "{", "}", "{}", "{}}", "{} {}", "null", "[]", "\"\"", "0", "{\"\xff\":1}",
		`{"a":{"b":{"c":[[[[[[[[[[]]]]]]]]]]}}}`, "\ufeff{}", `{"\u0000":1}`, `{"":1}`} {
		f.Add([]byte(s))
	}
	api := fuzzAPI(f)
	f.Fuzz(func(t *testing.T, body []byte) {
		req := httptest.NewRequest(method, path, strings.NewReader(string(body)))
		rec := httptest.NewRecorder()
		api.ServeHTTP(rec, req)
		requireSafeAnswer(t, rec, fmt.Sprintf("%s %s %q", method, path, body))
	})
}

func FuzzStaffBody(f *testing.F) {
	fuzzBody(f, "POST", "/staff", `{"staff_id":"s-1","email":"ann@x.org","name":"Ann"}`)
}

func FuzzWalletBody(f *testing.F) {
	fuzzBody(f, "POST", "/wallets", `{"wallet_id":"w-1","currency":"EUR","balance":100}`)
}

func FuzzTransferBody(f *testing.F) {
	fuzzBody(f, "POST", "/transfers", `{"transfer_id":"t-2","from_wallet_id":"alice","to_wallet_id":"bob","amount":5,"currency":"EUR"}`)
}

func FuzzCancelBody(f *testing.F) {
	fuzzBody(f, "POST", "/transfers/t-1/cancel", `{"reason":"asked"}`, `{}`)
}

func FuzzLobbyBody(f *testing.F) {
	fuzzBody(f, "POST", "/lobbies", `{"lobby_id":"l-2","words":["stone","Éclair"]}`)
}

func FuzzGuessBody(f *testing.F) {
	fuzzBody(f, "POST", "/lobbies/l-1/guesses", `{"word":"apple"}`, `{"word":"r2d2"}`)
}

// FuzzPathID puts an arbitrary id, every byte percent-encoded, in the path
// of every route that takes one, and in the staff query.
func FuzzPathID(f *testing.F) {
	for _, s := range []string{"alice", "t-1", "l-1", "s-1", "\x00", "\xff", "\xc3\x28", "a/b", "a b", "..", ".", "",
		"%", "%00", "a\nb", strings.Repeat("x", 200), "é", "\u2028", "ann@x.org", " Ann@X.org "} {
		f.Add(s)
	}
	api := fuzzAPI(f)
	f.Fuzz(func(t *testing.T, id string) {
		var esc strings.Builder
		for i := range len(id) {
			fmt.Fprintf(&esc, "%%%02X", id[i])
		}
		e := esc.String()
		for _, target := range []struct{ method, path, body string }{
			{"GET", "/wallets/" + e, ""},
			{"GET", "/transfers/" + e, ""},
			{"POST", "/transfers/" + e + "/approve", ""},
			{"POST", "/transfers/" + e + "/cancel", ""},
			{"POST", "/lobbies/" + e + "/guesses", `{"word":"stone"}`},
			{"GET", "/staff/" + e, ""},
			{"GET", "/staff?email=" + e, ""},
		} {
			req := httptest.NewRequest(target.method, target.path, strings.NewReader(target.body))
			rec := httptest.NewRecorder()
			api.ServeHTTP(rec, req)
			requireSafeAnswer(t, rec, fmt.Sprintf("%s %s", target.method, target.path))
		}
	})
}
