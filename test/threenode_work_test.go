package e2e

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/claimbus/claimbus/internal/pgtest"
)

// Transfers and lobbies worked on from three serve processes at once, in
// both transports: each transfer is approved or cancelled exactly once and
// money is neither made nor lost; each word of a lobby has exactly one
// winner. The default is 50 approve/cancel pairs over 25 transfers and 200
// guesses over 5 lobbies; the long form 200 pairs over 50 transfers and
// 1,000 guesses over 10 lobbies.
func TestThreeNodesTransfersAndLobbies(t *testing.T) {
	t.Parallel()
	bin := buildApp(t)
	for _, transport := range []string{"inprocess", "postgres"} {
		t.Run(transport, func(t *testing.T) {
			t.Parallel()
			dsn := pgtest.DSN(t)
			nodes := startNodes(t, bin, dsn, []string{"a", "b", "c"}, "-transport", transport)
			pool := pgtest.Connect(t, dsn, pgtest.PoolConfig{MaxConns: 2, ApplicationName: "observer"})
			c := newClient(t)
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
			defer cancel()
			node := func(i int) string { return nodes[i%len(nodes)].url }

			t.Run("approve and cancel", func(t *testing.T) {
				transfers, perTransfer := sizes(25, 50), sizes(2, 4) // pairs: 50, 200
				const amount = 10_00
				start := int64(transfers * amount)
				for _, w := range []map[string]any{
					{"wallet_id": "alice", "currency": "EUR", "balance": start},
					{"wallet_id": "bob", "currency": "EUR", "balance": 0},
				} {
					ans := post(ctx, c, node(0)+"/wallets", w)
					require.Equal(t, http.StatusCreated, ans.Status, "%v", ans.Body)
				}
				for i := range transfers {
					ans := post(ctx, c, node(i)+"/transfers", map[string]any{
						"transfer_id": fmt.Sprintf("t-%d", i), "from_wallet_id": "alice", "to_wallet_id": "bob", "amount": amount, "currency": "EUR",
					})
					require.Equal(t, http.StatusCreated, ans.Status, "%v", ans.Body)
				}
				type try struct {
					transfer int
					verb     string
					answer   answer
				}
				tries := make([]try, 0, 2*transfers*perTransfer)
				for range perTransfer {
					for i := range transfers {
						tries = append(tries, try{transfer: i, verb: "approve"}, try{transfer: i, verb: "cancel"})
					}
				}
				var wg sync.WaitGroup
				for k := range tries {
					wg.Go(func() {
						tr := &tries[k]
						tr.answer = post(ctx, c, fmt.Sprintf("%s/transfers/t-%d/%s", node(k), tr.transfer, tr.verb), nil)
					})
				}
				wg.Wait()
				won := make([]string, transfers) // transfer -> the verb that won
				for _, tr := range tries {
					a := tr.answer
					require.NoError(t, a.Err)
					if a.Status == http.StatusOK {
						require.Empty(t, won[tr.transfer], "t-%d decided twice", tr.transfer)
						won[tr.transfer] = tr.verb
						continue
					}
					require.Less(t, a.Status, 500, "%v", a.Body)
					require.Contains(t, []string{"locked", "not_open"}, a.str("code"), "t-%d %s: %d %v", tr.transfer, tr.verb, a.Status, a.Body)
				}
				approved := 0
				for i, verb := range won {
					require.NotEmpty(t, verb, "t-%d never decided", i)
					state := map[string]string{"approve": "approved", "cancel": "cancelled"}[verb]
					require.Equal(t, state, get(ctx, c, fmt.Sprintf("%s/transfers/t-%d", node(i+1), i)).str("state"))
					if verb == "approve" {
						approved++
					}
				}
				var alice, bob int64
				require.NoError(t, pool.QueryRow(ctx, `SELECT (SELECT balance FROM wallet WHERE wallet_id = 'alice'),
					(SELECT balance FROM wallet WHERE wallet_id = 'bob')`).Scan(&alice, &bob))
				require.Equal(t, int64(approved*amount), bob)
				require.Equal(t, start, alice+bob, "money is neither made nor lost")
			})

			t.Run("guesses", func(t *testing.T) {
				lobbies, guesses := sizes(5, 10), sizes(200, 1000)
				words := []string{"apple", "river", "stone", "cloud", "maple"}
				for l := range lobbies {
					ans := post(ctx, c, node(l)+"/lobbies", map[string]any{"lobby_id": fmt.Sprintf("l-%d", l), "words": words})
					require.Equal(t, http.StatusCreated, ans.Status, "%v", ans.Body)
				}
				// Each lobby gets its five words and a wrong one in turn.
				type guess struct {
					lobby  int
					word   string
					answer answer
				}
				gs := make([]guess, guesses)
				for i := range gs {
					gs[i] = guess{lobby: i % lobbies, word: append(words, "wrong")[(i/lobbies)%(len(words)+1)]}
				}
				var wg sync.WaitGroup
				for i := range gs {
					wg.Go(func() {
						g := &gs[i]
						g.answer = post(ctx, c, fmt.Sprintf("%s/lobbies/l-%d/guesses", node(i), g.lobby), map[string]string{"word": g.word})
					})
				}
				wg.Wait()
				winners := map[string]int{} // "lobby word" -> wins
				for _, g := range gs {
					require.NoError(t, g.answer.Err)
					require.Equal(t, http.StatusOK, g.answer.Status, "%v", g.answer.Body)
					if g.answer.Body["won"] == true {
						winners[fmt.Sprintf("l-%d %s", g.lobby, g.word)]++
					}
				}
				var wins int
				require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM lobby_win`).Scan(&wins))
				require.Len(t, winners, wins, "a win answered for each row")
				for k, n := range winners {
					require.Equal(t, 1, n, "%s won %d times", k, n)
				}
				// Every word of every lobby was guessed, so each has its winner.
				require.Equal(t, lobbies*len(words), wins)
			})

			for _, p := range nodes {
				p.requireCleanExit(t)
				require.NotContains(t, p.out.String(), backstopLog)
			}
		})
	}
}

// Bad inputs against a running process, each answered 4xx with a JSON
// code, never 5xx (a few of the cases of example_app/app's table); and a
// client sending its body byte by byte, slower than the server's read
// timeout (10 s), is cut off while the node keeps serving others.
func TestProcessBadInputsAndSlowClient(t *testing.T) {
	t.Parallel()
	bin := buildApp(t)
	n := startProcess(t, bin, pgtest.DSN(t), "a").ready(t)
	c := newClient(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	t.Run("bad inputs", func(t *testing.T) {
		for _, bad := range []struct {
			name, method, path, body string
			status                   int
			code                     string
		}{
			{"NUL in name", "POST", "/staff", `{"staff_id":"s-9","email":"n@x.org","name":"A\u0000B"}`, 422, "invalid"},
			{"unknown key", "POST", "/staff", `{"staff_id":"s-9","email":"n@x.org","name":"N","x":1}`, 400, "bad_request"},
			{"key twice", "POST", "/staff", `{"staff_id":"s-9","staff_id":"s-8","email":"n@x.org","name":"N"}`, 400, "bad_request"},
			{"two objects", "POST", "/staff", `{} {}`, 400, "bad_request"},
			{"not JSON", "POST", "/staff", `{"staff_id":`, 400, "bad_request"},
			{"invalid UTF-8", "POST", "/staff", "{\"staff_id\":\"s-9\",\"email\":\"n@x.org\",\"name\":\"\xff\"}", 400, "bad_request"},
			{"body too large", "POST", "/staff", `{"staff_id":"s-9","email":"n@x.org","name":"` + strings.Repeat("a", 70<<10) + `"}`, 413, "too_large"},
			{"wallet slash in id", "POST", "/wallets", `{"wallet_id":"w/1","currency":"EUR","balance":1}`, 422, "invalid"},
			{"not a currency", "POST", "/wallets", `{"wallet_id":"w-1","currency":"ABC","balance":1}`, 422, "invalid"},
		} {
			req, err := http.NewRequestWithContext(ctx, bad.method, n.url+bad.path, strings.NewReader(bad.body))
			require.NoError(t, err)
			req.Header.Set("Content-Type", "application/json")
			a := do(c, req)
			require.NoError(t, a.Err, bad.name)
			require.Equal(t, bad.status, a.Status, "%s: %v", bad.name, a.Body)
			require.Equal(t, bad.code, a.str("code"), "%s: %v", bad.name, a.Body)
		}
	})

	t.Run("slow client", func(t *testing.T) {
		u, err := url.Parse(n.url)
		require.NoError(t, err)
		conn, err := net.Dial("tcp", u.Host)
		require.NoError(t, err)
		defer conn.Close()
		body := `{"staff_id":"slow","email":"slow@example.org","name":"Slow Client, who types one byte every half second"}`
		_, err = fmt.Fprintf(conn, "POST /staff HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", u.Host, len(body))
		require.NoError(t, err)
		// The body, a byte each 500 ms: 50 s in all, far beyond the
		// read timeout. The writer stops at the first failed write.
		cut := make(chan time.Time, 1)
		started := time.Now()
		go func() {
			for i := range len(body) {
				if _, err := conn.Write([]byte{body[i]}); err != nil {
					break
				}
				time.Sleep(500 * time.Millisecond) //nolint:forbidigo // a slow client, one byte per half second: the sleep is the condition
			}
		}()
		go func() {
			resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
			if err == nil {
				// The server may answer the cut-off body before it closes.
				if resp.StatusCode >= 500 {
					t.Errorf("the slow client got %d", resp.StatusCode)
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
			cut <- time.Now()
		}()

		// Meanwhile the node serves other requests.
		for i := range 5 {
			ans := post(ctx, c, n.url+"/staff", signup{StaffID: fmt.Sprintf("fast-%d", i), Email: fmt.Sprintf("fast%d@example.org", i), Name: "Fast"})
			require.NoError(t, ans.Err)
			require.Equal(t, http.StatusCreated, ans.Status, "%v", ans.Body)
		}
		select {
		case at := <-cut:
			took := at.Sub(started)
			t.Logf("the slow client was cut off after %v", took.Round(time.Millisecond))
			require.Less(t, took, 20*time.Second)
		case <-time.After(30 * time.Second):
			t.Fatal("the slow client still holds its request after 30 s")
		}
		ans := get(ctx, c, n.url+"/healthz")
		require.Equal(t, http.StatusOK, ans.Status, "%v", ans.Body)
	})

	n.requireCleanExit(t)
}
