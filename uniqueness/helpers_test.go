package uniqueness_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/claimbus/claimbus/bus"
	"github.com/claimbus/claimbus/commands"
	"github.com/claimbus/claimbus/internal/testwait"
	"github.com/claimbus/claimbus/lockstore"
	"github.com/claimbus/claimbus/lockstore/postgres"
	"github.com/claimbus/claimbus/middleware"
	"github.com/claimbus/claimbus/uniqueness"
)

// waitFor bounds every wait for an observable state.
const waitFor = 20 * time.Second

// errDuplicate is what a staff table's insert returns for an email it
// already holds: the unique index, the backstop the claims must keep from
// ever firing.
var errDuplicate = errors.New("duplicate email: the unique index fired")

// staffTable is where a CreateStaff handler writes, and what the lookup
// reads: an in-memory map, a SQLite or a PostgreSQL table.
type staffTable interface {
	// taken reports whether a staff row has email.
	taken(ctx context.Context, email string) (bool, error)
	// owner returns the staff id of the row with email, "" when none.
	owner(ctx context.Context, email string) (string, error)
	// insert adds a row, failing with errDuplicate when email is there.
	insert(ctx context.Context, id, email, name string) error
	// count returns the number of rows.
	count(ctx context.Context) (int, error)
}

// memTable is a staffTable in memory.
type memTable struct {
	mu   sync.Mutex
	rows map[string]string // email → staff id
}

func newMemTable() *memTable { return &memTable{rows: make(map[string]string)} }

func (m *memTable) taken(_ context.Context, email string) (bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	_, ok := m.rows[email]
	return ok, nil
}

func (m *memTable) owner(_ context.Context, email string) (string, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.rows[email], nil
}

func (m *memTable) insert(_ context.Context, id, email, _ string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.rows[email]; ok {
		return errDuplicate
	}
	m.rows[email] = id
	return nil
}

func (m *memTable) count(context.Context) (int, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.rows), nil
}

// emailRule is the sign-up rule: CreateStaff's email is unique in
// scope staff.email, looked up in table, with its own earlier success
// recognised by the staff id.
func emailRule(table staffTable) uniqueness.Rule { return emailRuleWith(table, table.taken) }

// emailRuleWith is emailRule with lookup as the lookup, and the extra
// options.
func emailRuleWith(table staffTable, lookup func(context.Context, string) (bool, error), extra ...uniqueness.Option) uniqueness.Rule {
	return uniqueness.Field(uniqueness.Names{Field: "email", Scope: "staff.email"},
		func(c *commands.CreateStaff) string { return c.Email }, lookup, emailOptions(table, extra)...)
}

// emailRuleSQL is emailRuleWith with the lookup written once, as lookup on
// db (see uniqueness.FieldSQL).
func emailRuleSQL(table staffTable, db interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}, lookup string, extra ...uniqueness.Option,
) uniqueness.Rule {
	return uniqueness.FieldSQL(uniqueness.Names{Field: "email", Scope: "staff.email"},
		func(c *commands.CreateStaff) string { return c.Email }, db, lookup, emailOptions(table, extra)...)
}

// emailOptions are the options of the email rules: NormalizeEmail, an
// AlreadyDone reading the owner of the email in table, and extra.
func emailOptions(table staffTable, extra []uniqueness.Option) []uniqueness.Option {
	return append([]uniqueness.Option{
		uniqueness.Normalize(uniqueness.NormalizeEmail),
		uniqueness.AlreadyDone(func(ctx context.Context, c *commands.CreateStaff, email string) (bool, error) {
			id, err := table.owner(ctx, email)
			return id == c.StaffID, err
		}),
	}, extra...)
}

// staffHandler is a CreateStaff handler writing to a table; it counts its
// runs and the duplicates the table refused.
type staffHandler struct {
	table      staffTable
	runs       atomic.Int64
	duplicates atomic.Int64
}

func (h *staffHandler) handle(ctx context.Context, c *commands.CreateStaff) (string, error) {
	h.runs.Add(1)
	if err := h.table.insert(ctx, c.StaffID, uniqueness.NormalizeEmail(c.Email), c.Name); err != nil {
		if errors.Is(err, errDuplicate) {
			h.duplicates.Add(1)
		}
		return "", err
	}
	return c.StaffID, nil
}

// newBus starts an in-process bus configured by cfg with the CreateStaff
// handler h, closed when the test ends.
func newBus(t testing.TB, cfg bus.Config, h *staffHandler) *bus.Bus {
	t.Helper()
	return startBusWith(t, cfg, handler(h.handle))
}

// startBus starts an in-process bus with mw as its middleware and the
// handlers, closed when the test ends.
func startBus(t testing.TB, mw middleware.Middleware, handlers ...func(*bus.Bus) error) *bus.Bus {
	t.Helper()
	return startBusWith(t, bus.Config{Middleware: []middleware.Middleware{mw}}, handlers...)
}

// startBusWith starts a bus configured by cfg with the handlers, closed
// when the test ends.
func startBusWith(t testing.TB, cfg bus.Config, handlers ...func(*bus.Bus) error) *bus.Bus {
	t.Helper()
	b, err := bus.New(cfg)
	require.NoError(t, err)
	for _, register := range handlers {
		require.NoError(t, register(b))
	}
	require.NoError(t, b.Start(context.Background()))
	t.Cleanup(func() { require.NoError(t, b.Close()) })
	return b
}

// handler is the registration of h on a bus, for startBus.
func handler[C any](h func(context.Context, *C) (string, error)) func(*bus.Bus) error {
	return func(b *bus.Bus) error { return bus.Handle(b, h) }
}

// newUniqueness returns the middleware for cfg, failing the test on error.
func newUniqueness(t testing.TB, cfg uniqueness.Config) *uniqueness.Middleware {
	t.Helper()
	m, err := uniqueness.New(cfg)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, m.Flush(context.Background())) })
	return m
}

func newMemory(t testing.TB) *lockstore.Memory {
	t.Helper()
	m, err := lockstore.NewMemory(lockstore.MemoryConfig{})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, m.Close()) })
	return m
}

// requireNothingHeld asserts that store holds no lock. On the PostgreSQL
// store it waits for that: the last releases of a command that returned may
// still be on their way (the store carries them in its next round trip,
// within a millisecond: lockext.ReleaseLater), but none stays held. The
// other stores release at once.
func requireNothingHeld(t testing.TB, store lockstore.Store) {
	t.Helper()
	if _, later := store.(*postgres.Store); !later {
		held, err := store.Held(context.Background())
		require.NoError(t, err)
		require.Empty(t, held)
		return
	}
	var held []lockstore.Holder
	testwait.Until(t, waitFor, time.Millisecond, func() bool {
		var err error
		held, err = store.Held(context.Background())
		require.NoError(t, err)
		return len(held) == 0
	}, "the store still holds %v", &held)
}

// mixedCase writes email in a mix of cases and pads it with spaces, the
// i-th way.
func mixedCase(email string, i int) string {
	var b strings.Builder
	for j, r := range email {
		if (i>>(j%8))&1 == 1 {
			r = []rune(strings.ToUpper(string(r)))[0]
		}
		b.WriteRune(r)
	}
	return strings.Repeat(" ", i%3) + b.String()
}

// stormResult counts the outcomes of a storm.
type stormResult struct {
	ok, taken atomic.Int64
}

// storm dispatches total CreateStaff commands over distinct emails in mixed
// case, from total goroutines at once, spread over the buses, and counts
// the outcomes; any other outcome fails the test.
func storm(t *testing.T, buses []*bus.Bus, total, distinct int) *stormResult {
	t.Helper()
	var res stormResult
	var wg sync.WaitGroup
	start := make(chan struct{})
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	for i := range total {
		b := buses[i%len(buses)]
		cmd := &commands.CreateStaff{
			StaffID: fmt.Sprintf("staff-%03d", i),
			Email:   mixedCase(fmt.Sprintf("user%02d@example.org", i%distinct), i),
			Name:    "Storm",
		}
		wg.Go(func() {
			<-start
			_, err := bus.Dispatch[string](ctx, b, cmd)
			var rej *middleware.Rejection
			switch {
			case err == nil:
				res.ok.Add(1)
			case errors.As(err, &rej) && errors.Is(err, middleware.ErrAlreadyTaken):
				if rej.Field != "email" || strings.Contains(rej.Error(), "example.org") {
					t.Errorf("rejection %q names a field other than email, or the value", rej.Error())
				}
				res.taken.Add(1)
			default:
				t.Errorf("unexpected outcome for %s: %v", cmd.Email, err)
			}
		})
	}
	close(start)
	wg.Wait()
	return &res
}

// stormOnStore runs the sign-up storm on one bus whose Uniqueness
// middleware takes its keys on store and looks emails up in table, where
// the handler writes, and asserts its outcome (requireStormOutcome).
func stormOnStore(t *testing.T, store lockstore.Store, table staffTable) {
	t.Helper()
	h := &staffHandler{table: table}
	mw := newUniqueness(t, uniqueness.Config{Locker: store, Rules: []uniqueness.Rule{emailRule(table)}})
	b := newBus(t, bus.Config{Middleware: []middleware.Middleware{mw}}, h)
	requireStormOutcome(t, storm(t, []*bus.Bus{b}, 200, 20), table, h)
	requireNothingHeld(t, store)
}

// requireStormOutcome asserts the outcome of a storm of 200 commands over
// 20 emails handled by handlers writing to table: one command per email
// succeeded and its handler alone ran, the others were already_taken, and
// the table's unique index never fired.
func requireStormOutcome(t *testing.T, res *stormResult, table staffTable, handlers ...*staffHandler) {
	t.Helper()
	require.EqualValues(t, 20, res.ok.Load())
	require.EqualValues(t, 180, res.taken.Load())
	var runs, duplicates int64
	for _, h := range handlers {
		runs += h.runs.Load()
		duplicates += h.duplicates.Load()
	}
	require.EqualValues(t, 20, runs, "exactly one handler run per email")
	require.Zero(t, duplicates, "the unique index must never fire")
	n, err := table.count(context.Background())
	require.NoError(t, err)
	require.Equal(t, 20, n)
}

// logBuffer collects the records of a JSON slog handler; it is safe for
// concurrent writers.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// records decodes the records written so far.
func (b *logBuffer) records(t testing.TB) []map[string]any {
	t.Helper()
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []map[string]any
	dec := json.NewDecoder(bytes.NewReader(b.buf.Bytes()))
	for dec.More() {
		var rec map[string]any
		require.NoError(t, dec.Decode(&rec))
		out = append(out, rec)
	}
	return out
}
