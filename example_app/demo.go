package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/claimbus/claimbus/commands"
	"github.com/claimbus/claimbus/example_app/app"
	"github.com/claimbus/claimbus/lockstore/sqlite"
	"github.com/claimbus/claimbus/middleware"
)

// demoReport is what the demo counted, for its test.
type demoReport struct {
	Staff struct {
		Sent, Created, Taken, Invalid, Rows int
		// TakenFields and InvalidFields count the fields the rejections
		// named.
		TakenFields, InvalidFields map[string]int
	}
	Transfers struct {
		// Race1 and Race2 are the outcomes of the two approve/cancel
		// races, winner first: a state and a rejection code.
		Race1, Race2                    [2]string
		Approved, InsufficientFunds     int
		AliceBalance, BobBalance, Total int64
	}
	Lobby struct {
		Winners                map[string]int
		Late, Wrong, WordsLeft int
	}
	Backstops int64
	// Events is the events story: the storm of the staff story on the
	// events model with a lagging projection, without reservations and
	// with them.
	Events struct {
		Without, With eventsRun
	}
}

// eventsRun is what one run of the events story counted.
type eventsRun struct {
	// Created counts the sign-ups answered as created; Registered the
	// StaffRegistered events appended; Members the members in the read
	// model once projected; Backstops the events its unique index refused.
	Created, Registered, Members int
	Backstops                    int64
}

// demoLag is the projection lag of the events story.
const demoLag = 300 * time.Millisecond

// runDemo runs the three stories on a fresh SQLite database in a temporary
// directory, removed at the end, and prints them to w.
func runDemo(ctx context.Context, w io.Writer) (r demoReport, err error) {
	dir, err := os.MkdirTemp("", "claimbus-demo-")
	if err != nil {
		return r, err
	}
	defer func() { err = errors.Join(err, os.RemoveAll(dir)) }()

	g := &gate{}
	node, closeNode, err := demoNode(ctx, filepath.Join(dir, "demo.db"), app.Config{
		Name:       "demo",
		Middleware: []middleware.Middleware{middleware.Hooks{OnBeforeDispatch: g.before}},
	})
	if err != nil {
		return r, err
	}
	defer func() { err = errors.Join(err, closeNode()) }()

	fmt.Fprintln(w, "claimbus example: four stories on embedded SQLite databases, in a temporary directory")
	for _, story := range []func(context.Context, io.Writer, *app.Node, *gate, *demoReport) error{staffStory, walletStory, lobbyStory} {
		if err := story(ctx, w, node, g, &r); err != nil {
			return r, err
		}
	}
	r.Backstops = node.Backstops()
	if r.Backstops == 0 {
		fmt.Fprintln(w, "\nThe unique indexes under the claims never fired: the claims and locks kept every duplicate out.")
	} else {
		fmt.Fprintf(w, "\nThe unique indexes under the claims fired %d times: something bypassed the claims.\n", r.Backstops)
	}
	if err := eventsStory(ctx, w, dir, &r); err != nil {
		return r, err
	}
	return r, nil
}

// demoNode starts a node configured by cfg on a fresh SQLite database at
// path, and returns it with what closes it, its store and its database.
func demoNode(ctx context.Context, path string, cfg app.Config) (node *app.Node, closeAll func() error, err error) {
	db, err := sql.Open("sqlite", sqlite.DSN(path, 0))
	if err != nil {
		return nil, nil, err
	}
	store, err := sqlite.New(ctx, db, sqlite.Config{})
	if err != nil {
		return nil, nil, errors.Join(err, db.Close())
	}
	cfg.Backend = app.SQLiteBackend(store)
	node, err = app.New(ctx, cfg)
	if err != nil {
		return nil, nil, errors.Join(err, store.Close(), db.Close())
	}
	return node, func() error { return errors.Join(node.Close(), store.Close(), db.Close()) }, nil
}

// eventsStory: the storm of the staff story on the events staff model,
// whose projection fills the read model the claims' lookup reads demoLag
// after each sign-up: without reservations the lookup does not see the
// first sign-up of an address and lets the others through (the read
// model's unique index catches them); with them, each address is
// registered once.
func eventsStory(ctx context.Context, w io.Writer, dir string, r *demoReport) error {
	cmds, people := stormCommands()
	fmt.Fprintf(w, "\n4. Event-sourced sign-up: the storm of story 1 (%d addresses, %d sign-ups) on the events model, whose projection\n"+
		"   shows a sign-up in the read model (which the claims' lookup reads) %v later\n", people, len(cmds), demoLag)
	for _, run := range []struct {
		name     string
		disable  bool
		counts   *eventsRun
		expected string
	}{
		{"without reservations", true, &r.Events.Without, "the lookup cannot see what the projection has not applied yet"},
		{"with reservations", false, &r.Events.With, "a reservation holds each address until the read model shows it"},
	} {
		node, closeNode, err := demoNode(ctx, filepath.Join(dir, "events-"+strings.ReplaceAll(run.name, " ", "-")+".db"), app.Config{
			Name: "demo-events", StaffModel: app.StaffEvents, ProjectionLag: demoLag, DisableReservations: run.disable,
		})
		if err != nil {
			return err
		}
		err = eventsRunOn(ctx, node, cmds, run.counts)
		if err = errors.Join(err, closeNode()); err != nil {
			return err
		}
		c := run.counts
		fmt.Fprintf(w, "   %-21s created %3d, StaffRegistered %3d, members %3d, duplicates caught by the backstop %3d (%s)\n",
			run.name+":", c.Created, c.Registered, c.Members, c.Backstops, run.expected)
	}
	return nil
}

// eventsRunOn sends cmds to node at once, waits for the projection and
// counts the outcome into c.
func eventsRunOn(ctx context.Context, node *app.Node, cmds []*commands.CreateStaff, c *eventsRun) error {
	for _, err := range concurrently(len(cmds), func(i int) error { _, err := node.CreateStaff(ctx, cmds[i]); return err }) {
		var rej *middleware.Rejection
		switch {
		case err == nil:
			c.Created++
		case errors.As(err, &rej) && (rej.Code == middleware.CodeAlreadyTaken || rej.Code == middleware.CodeInvalid):
		default:
			return fmt.Errorf("create staff: %w", err)
		}
	}
	if err := node.WaitProjected(ctx); err != nil {
		return err
	}
	var err error
	if c.Registered, err = node.StaffRegistrations(ctx, ""); err != nil {
		return err
	}
	if c.Members, err = node.StaffCount(ctx); err != nil {
		return err
	}
	c.Backstops = node.BackstopViolations()
	return nil
}

// stormCopies is how many times the storm sends each address.
const stormCopies = 5

// stormCommands returns the storm of the staff story: people addresses,
// each sent stormCopies times in mixed case, and a few malformed ones.
func stormCommands() (cmds []*commands.CreateStaff, people int) {
	people = 12
	for p := range people {
		local := fmt.Sprintf("person%02d", p)
		variants := []string{
			local + "@example.org", strings.ToUpper(local) + "@Example.org", local + "@EXAMPLE.ORG",
			" " + local + "@example.org ", strings.ToUpper(local[:1]) + local[1:] + "@example.Org",
		}
		for c := range stormCopies {
			cmds = append(cmds, &commands.CreateStaff{StaffID: fmt.Sprintf("s-%02d-%d", p, c), Email: variants[c], Name: "Person " + local})
		}
	}
	for i, bad := range []string{"not-an-email", "person00@", "Person <person00@example.org>", ""} {
		cmds = append(cmds, &commands.CreateStaff{StaffID: fmt.Sprintf("s-bad-%d", i), Email: bad, Name: "Mallory"})
	}
	return cmds, people
}

// staffStory: a storm of sign-ups, the same addresses in mixed case.
func staffStory(ctx context.Context, w io.Writer, node *app.Node, _ *gate, r *demoReport) error {
	cmds, people := stormCommands()
	errs := concurrently(len(cmds), func(i int) error { _, err := node.CreateStaff(ctx, cmds[i]); return err })
	s := &r.Staff
	s.Sent = len(cmds)
	s.TakenFields, s.InvalidFields = map[string]int{}, map[string]int{}
	for _, err := range errs {
		var rej *middleware.Rejection
		switch {
		case err == nil:
			s.Created++
		case errors.As(err, &rej) && rej.Code == middleware.CodeAlreadyTaken:
			s.Taken++
			s.TakenFields[rej.Field]++
		case errors.As(err, &rej) && rej.Code == middleware.CodeInvalid:
			s.Invalid++
			s.InvalidFields[rej.Field]++
		default:
			return fmt.Errorf("create staff: %w", err)
		}
	}
	rows, err := node.StaffCount(ctx)
	if err != nil {
		return err
	}
	s.Rows = rows
	fmt.Fprintf(w, "\n1. Staff sign-up: %d CreateStaff at once, %d addresses sent %d times each in mixed case, and %d malformed\n",
		s.Sent, people, stormCopies, s.Sent-people*stormCopies)
	fmt.Fprintf(w, "   created:        %3d\n", s.Created)
	fmt.Fprintf(w, "   already_taken:  %3d  by field: %s\n", s.Taken, fields(s.TakenFields))
	fmt.Fprintf(w, "   invalid:        %3d  by field: %s\n", s.Invalid, fields(s.InvalidFields))
	fmt.Fprintf(w, "   rows in staff:  %3d, one per address\n", s.Rows)
	return nil
}

// walletStory: approve and cancel racing on one transfer, and transfers
// racing on one wallet.
func walletStory(ctx context.Context, w io.Writer, node *app.Node, g *gate, r *demoReport) error {
	t := &r.Transfers
	for _, wl := range []app.Wallet{{WalletID: "alice", Currency: "EUR", Balance: 100_00}, {WalletID: "bob", Currency: "EUR", Balance: 20_00}} {
		if err := node.AddWallet(ctx, wl); err != nil {
			return err
		}
	}
	fmt.Fprintf(w, "\n2. Wallet transfers: alice has 100.00 EUR, bob 20.00 EUR; one lock per transfer\n")

	open := func(id, from, to string, amount int64) error {
		_, err := node.OpenTransfer(ctx, &commands.OpenTransfer{TransferID: id, FromWalletID: from, ToWalletID: to, Amount: amount, Currency: "EUR"})
		return err
	}
	approve := func(id string) (string, error) {
		tr, err := node.ApproveTransfer(ctx, &commands.ApproveTransfer{TransferID: id})
		return tr.State, err
	}
	cancel := func(id string) (string, error) {
		tr, err := node.CancelTransfer(ctx, &commands.CancelTransfer{TransferID: id, Reason: "changed my mind"})
		return tr.State, err
	}

	// Each race holds the first command inside its lock, on cue, until
	// the second one has been answered.
	races := []struct {
		id               string
		amount           int64
		first, second    func(string) (string, error)
		firstName, other string
		out              *[2]string
	}{
		{"t-1", 30_00, approve, cancel, "approve", "cancel", &t.Race1},
		{"t-2", 25_00, cancel, approve, "cancel", "approve", &t.Race2},
	}
	for _, race := range races {
		if err := open(race.id, "alice", "bob", race.amount); err != nil {
			return err
		}
		entered, release := g.hold(func(cmd any) bool { return transferID(cmd) == race.id })
		first := make(chan result, 1)
		go func() { state, err := race.first(race.id); first <- result{state, err} }()
		select {
		case <-entered:
		case won := <-first:
			return fmt.Errorf("%s %s ended before it held its lock: %w", race.firstName, race.id, won.err)
		}
		_, err := race.second(race.id)
		release()
		won := <-first
		if won.err != nil {
			return fmt.Errorf("%s %s: %w", race.firstName, race.id, won.err)
		}
		*race.out = [2]string{won.state, code(err)}
		fmt.Fprintf(w, "   %s alice -> bob %s EUR: %s arrives while %s holds the lock -> %s: %s, %s: %s\n",
			race.id, money(race.amount), race.other, race.firstName, race.firstName, won.state, race.other, code(err))
	}

	// Bob now has 20.00 + 30.00: enough for three of ten transfers of
	// 15.00, each under its own lock. The debit is one atomic UPDATE.
	const n, amount = 10, 15_00
	for i := range n {
		if err := open(fmt.Sprintf("t-bob-%d", i), "bob", "alice", amount); err != nil {
			return err
		}
	}
	errs := concurrently(n, func(i int) error { _, err := approve(fmt.Sprintf("t-bob-%d", i)); return err })
	for _, err := range errs {
		switch {
		case err == nil:
			t.Approved++
		case errors.Is(err, app.ErrInsufficientFunds):
			t.InsufficientFunds++
		default:
			return fmt.Errorf("approve: %w", err)
		}
	}
	fmt.Fprintf(w, "   %d transfers bob -> alice of %s EUR approved at once: %d approved, %d insufficient_funds\n",
		n, money(amount), t.Approved, t.InsufficientFunds)

	alice, err := node.Wallet(ctx, "alice")
	if err != nil {
		return err
	}
	bob, err := node.Wallet(ctx, "bob")
	if err != nil {
		return err
	}
	t.AliceBalance, t.BobBalance, t.Total = alice.Balance, bob.Balance, alice.Balance+bob.Balance
	fmt.Fprintf(w, "   balances: alice %s EUR, bob %s EUR (total %s EUR, as before)\n", money(alice.Balance), money(bob.Balance), money(t.Total))
	return nil
}

// lobbyStory: many players guessing the same words at once.
func lobbyStory(ctx context.Context, w io.Writer, node *app.Node, _ *gate, r *demoReport) error {
	words := []string{"apple", "river", "stone"}
	if err := node.AddLobby(ctx, "l-1", words); err != nil {
		return err
	}
	var guesses []string
	for _, word := range words {
		for i := range 10 {
			if i%2 == 1 {
				guesses = append(guesses, strings.ToUpper(word[:1])+word[1:])
				continue
			}
			guesses = append(guesses, word)
		}
	}
	for range 2 {
		guesses = append(guesses, "pear", "lake", "rock", "plum", "sand")
	}
	outcomes := make([]app.Guess, len(guesses))
	errs := concurrently(len(guesses), func(i int) (err error) {
		outcomes[i], err = node.GuessWord(ctx, &commands.GuessWord{LobbyID: "l-1", Word: guesses[i]})
		return err
	})
	l := &r.Lobby
	l.Winners = map[string]int{}
	for i, g := range outcomes {
		switch {
		case errs[i] != nil:
			return fmt.Errorf("guess: %w", errs[i])
		case g.Won:
			l.Winners[g.Word]++
		case g.Correct:
			l.Late++
		default:
			l.Wrong++
		}
	}
	lobby, err := node.Lobby(ctx, "l-1")
	if err != nil {
		return err
	}
	l.WordsLeft = lobby.WordsLeft
	fmt.Fprintf(w, "\n3. Lobby guesses: lobby l-1 hides %s; %d guesses at once, each word 10 times, and %d wrong ones\n",
		strings.Join(words, ", "), len(guesses), l.Wrong)
	fmt.Fprintf(w, "   winners: %s\n", fields(l.Winners))
	fmt.Fprintf(w, "   correct but late: %d, wrong: %d, words left: %d\n", l.Late, l.Wrong, l.WordsLeft)
	return nil
}

// result is the outcome of a command run in a goroutine.
type result struct {
	state string
	err   error
}

// concurrently runs f(0) to f(n-1) at once and returns their errors.
func concurrently(n int, f func(i int) error) []error {
	errs := make([]error, n)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range n {
		wg.Go(func() {
			<-start
			errs[i] = f(i)
		})
	}
	close(start)
	wg.Wait()
	return errs
}

// gate holds one chosen command inside its locks and claims until the
// demo lets it go, so that a second command arrives while the first one
// runs: what a slow disk or a double click does by chance, on cue. It runs
// after the node's middleware (app.Config.Middleware).
type gate struct {
	mu    sync.Mutex
	match func(cmd any) bool
	in    chan struct{}
	out   chan struct{}
}

// hold arms the gate for the next command match accepts: entered is closed
// once that command holds its locks and waits; release lets it go on.
func (g *gate) hold(match func(cmd any) bool) (entered <-chan struct{}, release func()) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.match, g.in, g.out = match, make(chan struct{}), make(chan struct{})
	out := g.out
	return g.in, sync.OnceFunc(func() { close(out) })
}

func (g *gate) before(ctx context.Context, p *middleware.Pipeline) {
	g.mu.Lock()
	if g.match == nil || !g.match(p.Command) {
		g.mu.Unlock()
		return
	}
	in, out := g.in, g.out
	g.match = nil
	g.mu.Unlock()
	close(in)
	select {
	case <-out:
	case <-ctx.Done():
	}
}

// transferID returns the transfer a command names, if any.
func transferID(cmd any) string {
	switch c := cmd.(type) {
	case *commands.ApproveTransfer:
		return c.TransferID
	case *commands.CancelTransfer:
		return c.TransferID
	}
	return ""
}

// code returns the code of the rejection err holds, or its message.
func code(err error) string {
	var rej *middleware.Rejection
	switch {
	case err == nil:
		return "ok"
	case errors.As(err, &rej):
		return rej.Code
	}
	return err.Error()
}

// money formats minor units as units with two decimals.
func money(cents int64) string { return fmt.Sprintf("%d.%02d", cents/100, cents%100) }

// fields formats counts by name, sorted by name: (field "email": 48).
func fields(m map[string]int) string {
	if len(m) == 0 {
		return ""
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s %d", k, m[k])
	}
	return strings.Join(parts, ", ")
}
