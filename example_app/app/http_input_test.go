package app_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/claimbus/claimbus/example_app/app"
)

// badInput is a request the API must refuse with a 4xx and a code.
type badInput struct {
	name         string
	method, path string
	body         string // raw
	status       int
	code         string
	field        string // "" when the answer names none
}

// badInputs are requests with a value the commands refuse (422 invalid,
// naming the field), or that are not a request the API understands (400
// bad_request): a body that is not one JSON object of the expected
// fields, a path id that no id can be, a query that is not an address.
// Several of them only the database refused before: a NUL byte, bytes that
// are not UTF-8.
var badInputs = []badInput{
	// Staff: every text field.
	{"staff NUL in name", "POST", "/staff", `{"staff_id":"s-9","email":"n@x.org","name":"A\u0000B"}`, 422, "invalid", "name"},
	{"staff NUL in email", "POST", "/staff", `{"staff_id":"s-9","email":"n\u0000@x.org","name":"N"}`, 422, "invalid", "email"},
	{"staff NUL in staff_id", "POST", "/staff", `{"staff_id":"s\u00009","email":"n@x.org","name":"N"}`, 422, "invalid", "staff_id"},
	{"staff slash in staff_id", "POST", "/staff", `{"staff_id":"s/9","email":"n@x.org","name":"N"}`, 422, "invalid", "staff_id"},
	{"staff DEL in name", "POST", "/staff", `{"staff_id":"s-9","email":"n@x.org","name":"A\u007fB"}`, 422, "invalid", "name"},
	{"staff name a number", "POST", "/staff", `{"staff_id":"s-9","email":"n@x.org","name":7}`, 400, "bad_request", ""},
	{"staff name null", "POST", "/staff", `{"staff_id":"s-9","email":"n@x.org","name":null}`, 400, "bad_request", ""},
	{"staff key in another case", "POST", "/staff", `{"STAFF_ID":"s-9","email":"n@x.org","name":"N"}`, 400, "bad_request", ""},
	{"staff key twice", "POST", "/staff", `{"staff_id":"s-9","staff_id":"s-8","email":"n@x.org","name":"N"}`, 400, "bad_request", ""},
	{"staff unknown key", "POST", "/staff", `{"staff_id":"s-9","email":"n@x.org","name":"N","x":1}`, 400, "bad_request", ""},
	{"staff trailing brace", "POST", "/staff", `{"staff_id":"s-9","email":"n@x.org","name":"N"}}`, 400, "bad_request", ""},
	{"staff two objects", "POST", "/staff", `{} {}`, 400, "bad_request", ""},
	{"staff null", "POST", "/staff", `null`, 400, "bad_request", ""},
	{"staff array", "POST", "/staff", `[{"staff_id":"s-9"}]`, 400, "bad_request", ""},
	{"staff string", "POST", "/staff", `"s-9"`, 400, "bad_request", ""},
	{"staff no body", "POST", "/staff", ``, 400, "bad_request", ""},
	{"staff not JSON", "POST", "/staff", `{"staff_id":`, 400, "bad_request", ""},
	{"staff invalid UTF-8", "POST", "/staff", "{\"staff_id\":\"s-9\",\"email\":\"n@x.org\",\"name\":\"\xff\"}", 400, "bad_request", ""},
	{"staff invalid UTF-8 in a key", "POST", "/staff", "{\"na\xc3me\":\"N\"}", 400, "bad_request", ""},
	{"staff lone surrogate", "POST", "/staff", `{"staff_id":"s-9","email":"n@x.org","name":"\ud800"}`, 400, "bad_request", ""},
	{"staff body too large", "POST", "/staff", `{"staff_id":"s-9","email":"n@x.org","name":"` + strings.Repeat("a", 70<<10) + `"}`, 413, "too_large", ""},

	// Wallets (set-up): as strict as the commands.
	{"wallet NUL in wallet_id", "POST", "/wallets", `{"wallet_id":"w\u00001","currency":"EUR","balance":1}`, 422, "invalid", "wallet_id"},
	{"wallet slash in wallet_id", "POST", "/wallets", `{"wallet_id":"w/1","currency":"EUR","balance":1}`, 422, "invalid", "wallet_id"},
	{"wallet control in wallet_id", "POST", "/wallets", `{"wallet_id":"w\u001b1","currency":"EUR","balance":1}`, 422, "invalid", "wallet_id"},
	{"wallet long wallet_id", "POST", "/wallets", `{"wallet_id":"` + strings.Repeat("w", 129) + `","currency":"EUR","balance":1}`, 422, "invalid", "wallet_id"},
	{"wallet NUL in currency", "POST", "/wallets", `{"wallet_id":"w-1","currency":"E\u0000R","balance":1}`, 422, "invalid", "currency"},
	{"wallet NUL-led currency", "POST", "/wallets", `{"wallet_id":"w-1","currency":"\u0000EU","balance":1}`, 422, "invalid", "currency"},
	{"wallet not an ISO 4217 code", "POST", "/wallets", `{"wallet_id":"w-1","currency":"ABC","balance":1}`, 422, "invalid", "currency"},
	{"wallet lower-case currency", "POST", "/wallets", `{"wallet_id":"w-1","currency":"eur","balance":1}`, 422, "invalid", "currency"},
	{"wallet non-ASCII currency", "POST", "/wallets", `{"wallet_id":"w-1","currency":"ÉUR","balance":1}`, 422, "invalid", "currency"},
	{"wallet balance a string", "POST", "/wallets", `{"wallet_id":"w-1","currency":"EUR","balance":"1"}`, 400, "bad_request", ""},
	{"wallet balance a fraction", "POST", "/wallets", `{"wallet_id":"w-1","currency":"EUR","balance":1.5}`, 400, "bad_request", ""},
	{"wallet balance past int64", "POST", "/wallets", `{"wallet_id":"w-1","currency":"EUR","balance":1e400}`, 400, "bad_request", ""},
	{"wallet balance over the limit", "POST", "/wallets", `{"wallet_id":"w-1","currency":"EUR","balance":1000000000000000001}`, 422, "invalid", "balance"},
	{"wallet key in another case", "POST", "/wallets", `{"Wallet_Id":"w-1","currency":"EUR","balance":1}`, 400, "bad_request", ""},

	// Lobbies (set-up).
	{"lobby NUL in lobby_id", "POST", "/lobbies", `{"lobby_id":"l\u00009","words":["apple"]}`, 422, "invalid", "lobby_id"},
	{"lobby slash in lobby_id", "POST", "/lobbies", `{"lobby_id":"l/9","words":["apple"]}`, 422, "invalid", "lobby_id"},
	{"lobby NUL in a word", "POST", "/lobbies", `{"lobby_id":"l-9","words":["ap\u0000ple"]}`, 422, "invalid", "words"},
	{"lobby words a string", "POST", "/lobbies", `{"lobby_id":"l-9","words":"apple"}`, 400, "bad_request", ""},
	{"lobby a word a number", "POST", "/lobbies", `{"lobby_id":"l-9","words":[1]}`, 400, "bad_request", ""},
	{"lobby words null", "POST", "/lobbies", `{"lobby_id":"l-9","words":null}`, 400, "bad_request", ""},

	// Transfers.
	{"transfer NUL in from_wallet_id", "POST", "/transfers", `{"transfer_id":"t-9","from_wallet_id":"a\u0000","to_wallet_id":"bob","amount":1,"currency":"EUR"}`, 422, "invalid", "from_wallet_id"},
	{"transfer NUL in currency", "POST", "/transfers", `{"transfer_id":"t-9","from_wallet_id":"alice","to_wallet_id":"bob","amount":1,"currency":"EU\u0000"}`, 422, "invalid", "currency"},
	{"transfer not an ISO 4217 code", "POST", "/transfers", `{"transfer_id":"t-9","from_wallet_id":"alice","to_wallet_id":"bob","amount":1,"currency":"XYZ"}`, 422, "invalid", "currency"},
	{"transfer amount a string", "POST", "/transfers", `{"transfer_id":"t-9","from_wallet_id":"alice","to_wallet_id":"bob","amount":"1","currency":"EUR"}`, 400, "bad_request", ""},
	{"transfer amount an object", "POST", "/transfers", `{"transfer_id":"t-9","from_wallet_id":"alice","to_wallet_id":"bob","amount":{},"currency":"EUR"}`, 400, "bad_request", ""},
	{"cancel NUL in reason", "POST", "/transfers/t-1/cancel", `{"reason":"no\u0000"}`, 422, "invalid", "reason"},
	{"cancel reason a number", "POST", "/transfers/t-1/cancel", `{"reason":5}`, 400, "bad_request", ""},
	{"cancel array", "POST", "/transfers/t-1/cancel", `[]`, 400, "bad_request", ""},
	{"cancel unknown key", "POST", "/transfers/t-1/cancel", `{"why":"x"}`, 400, "bad_request", ""},

	// Guesses.
	{"guess NUL in word", "POST", "/lobbies/l-1/guesses", `{"word":"ap\u0000ple"}`, 422, "invalid", "word"},
	{"guess word a number", "POST", "/lobbies/l-1/guesses", `{"word":5}`, 400, "bad_request", ""},
	{"guess key in another case", "POST", "/lobbies/l-1/guesses", `{"Word":"apple"}`, 400, "bad_request", ""},

	// Path ids.
	{"wallet id NUL", "GET", "/wallets/%00", "", 400, "bad_request", ""},
	{"wallet id not UTF-8", "GET", "/wallets/%FF", "", 400, "bad_request", ""},
	{"wallet id with an escaped slash", "GET", "/wallets/a%2Fb", "", 400, "bad_request", ""},
	{"wallet id with a space", "GET", "/wallets/a%20b", "", 400, "bad_request", ""},
	{"transfer id NUL", "GET", "/transfers/%00", "", 400, "bad_request", ""},
	{"transfer id not UTF-8", "GET", "/transfers/%C3%28", "", 400, "bad_request", ""},
	{"approve id NUL", "POST", "/transfers/%00/approve", "", 400, "bad_request", ""},
	{"approve id not UTF-8", "POST", "/transfers/%FF/approve", "", 400, "bad_request", ""},
	{"cancel id NUL", "POST", "/transfers/%00/cancel", "", 400, "bad_request", ""},
	{"guess lobby id NUL", "POST", "/lobbies/%00/guesses", `{"word":"apple"}`, 400, "bad_request", ""},
	{"guess lobby id not UTF-8", "POST", "/lobbies/%FF/guesses", `{"word":"apple"}`, 400, "bad_request", ""},
	{"staff id NUL", "GET", "/staff/%00", "", 400, "bad_request", ""},
	{"staff id not UTF-8", "GET", "/staff/%FF", "", 400, "bad_request", ""},

	// The staff query.
	{"staff query no email", "GET", "/staff", "", 400, "bad_request", ""},
	{"staff query not an address", "GET", "/staff?email=nope", "", 400, "bad_request", ""},
	{"staff query NUL", "GET", "/staff?email=a%00@x.org", "", 400, "bad_request", ""},
	{"staff query not UTF-8", "GET", "/staff?email=%FF@x.org", "", 400, "bad_request", ""},
	{"staff query twice", "GET", "/staff?email=a@x.org&email=b@x.org", "", 400, "bad_request", ""},
	{"staff query unknown parameter", "GET", "/staff?email=a@x.org&name=A", "", 400, "bad_request", ""},

	// Routes.
	{"no such route", "GET", "/nope", "", 404, "not_found", ""},
	{"a path the mux would clean", "GET", "//wallets/alice", "", 404, "not_found", ""},
	{"a dot segment", "GET", "/wallets/./alice", "", 404, "not_found", ""},
	{"a dot-dot segment", "GET", "/wallets/../healthz", "", 404, "not_found", ""},
	{"an empty id", "GET", "/wallets/", "", 404, "not_found", ""},
	{"a method the route lacks", "DELETE", "/wallets/alice", "", 405, "method_not_allowed", ""},
	{"POST to healthz", "POST", "/healthz", "", 405, "method_not_allowed", ""},
	{"GET a command", "GET", "/transfers/t-1/approve", "", 405, "method_not_allowed", ""},
}

// Bad input is a 4xx with a code, naming the field at fault when there is
// one, on both backends: never a 5xx, never the database's or Go's words.
// Nothing is written.
func TestBadInput(t *testing.T) {
	t.Parallel()
	onEachBackend(t, app.Config{}, func(t *testing.T, node *app.Node, url string) {
		seed(t, url)
		staff := staffCount(t, node)
		for _, in := range badInputs {
			t.Run(in.name, func(t *testing.T) {
				r := send(t, in.method, url+in.path, in.body)
				t.Logf("| %s | %s %s | %d | %v |", in.name, in.method, in.path, r.status, r.body["code"])
				require.Equal(t, in.status, r.status, "%s", r.raw)
				require.Equal(t, in.code, r.body["code"], "%s", r.raw)
				if in.field != "" {
					require.Equal(t, in.field, r.body["field"], "%s", r.raw)
				}
				require.NotEmpty(t, r.body["message"], "%s", r.raw)
			})
		}
		require.Equal(t, staff, staffCount(t, node), "no bad input wrote a member of staff")
		r := send(t, "GET", url+"/wallets/alice", "")
		require.Equal(t, float64(100_00), r.body["balance"], "no bad input moved money")
		r = send(t, "GET", url+"/transfers/t-1", "")
		require.Equal(t, "open", r.body["state"], "no bad input decided t-1")
	})
}

// A 405 says which methods the route has.
func TestMethodNotAllowedAllow(t *testing.T) {
	t.Parallel()
	_, _, url := sqliteNode(t, app.Config{})
	r := send(t, "DELETE", url+"/wallets/alice", "")
	require.Equal(t, http.StatusMethodNotAllowed, r.status)
	require.Equal(t, "GET, HEAD", r.header.Get("Allow"))
	r = send(t, "GET", url+"/transfers/t-1/approve", "")
	require.Equal(t, "POST", r.header.Get("Allow"))
	r = send(t, "HEAD", url+"/nope", "")
	require.Equal(t, http.StatusNotFound, r.status)
}

// Strict JSON still takes what it should: keys in any order, white space,
// escapes, surrogate pairs, and for cancel, whose body is optional, {}, no
// body or null.
func TestStrictJSONAccepts(t *testing.T) {
	t.Parallel()
	_, _, url := sqliteNode(t, app.Config{})
	seed(t, url)
	r := send(t, "POST", url+"/staff", " {\n\"name\" : \"Zo\\u00eb\", \"email\":\"zoe@x.org\",\t\"staff_id\":\"s-7\"}\n")
	require.Equal(t, http.StatusCreated, r.status, "%s", r.raw)
	require.Equal(t, "Zoë", r.body["name"])
	r = send(t, "POST", url+"/staff", `{"staff_id":"s-8","email":"emoji@x.org","name":"\ud83d\ude00 Ann"}`)
	require.Equal(t, http.StatusCreated, r.status, "a surrogate pair is one character: %s", r.raw)
	require.Equal(t, "😀 Ann", r.body["name"])
	r = send(t, "POST", url+"/transfers/t-1/cancel", `{}`)
	require.Equal(t, http.StatusOK, r.status, "%s", r.raw)
	r = send(t, "POST", url+"/transfers", `{"transfer_id":"t-2","from_wallet_id":"alice","to_wallet_id":"bob","amount":5,"currency":"EUR"}`)
	require.Equal(t, http.StatusCreated, r.status, "%s", r.raw)
	r = send(t, "POST", url+"/transfers/t-2/cancel", "")
	require.Equal(t, http.StatusOK, r.status, "%s", r.raw)
	r = send(t, "POST", url+"/transfers", `{"transfer_id":"t-3","from_wallet_id":"alice","to_wallet_id":"bob","amount":5,"currency":"EUR"}`)
	require.Equal(t, http.StatusCreated, r.status, "%s", r.raw)
	r = send(t, "POST", url+"/transfers/t-3/cancel", " null ")
	require.Equal(t, http.StatusOK, r.status, "an optional body may be null: %s", r.raw)
	r = send(t, "POST", url+"/wallets", `{"wallet_id":"carl","currency":"JPY","balance":0}`)
	require.Equal(t, http.StatusCreated, r.status, "%s", r.raw)
}
