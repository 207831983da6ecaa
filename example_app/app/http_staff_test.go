package app_test

import (
	"context"
	"database/sql"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/claimbus/claimbus/commands"
	"github.com/claimbus/claimbus/example_app/app"
	"github.com/claimbus/claimbus/middleware"
)

// A sign-up sent again (same staff_id, same address once normalised, same
// name) is a replay: 200 with what is stored, not a second 201. One that
// differs in the name is 409 conflicting_replay and changes nothing; one
// with another address is a staff_id already taken.
func TestStaffReplay(t *testing.T) {
	t.Parallel()
	onEachBackend(t, app.Config{}, func(t *testing.T, node *app.Node, url string) {
		stored := map[string]any{"staff_id": "s-1", "email": "ann@example.org", "name": "Ann Lee"}
		steps := []struct {
			name   string
			body   string
			status int
			want   map[string]any
		}{
			{"created", `{"staff_id":"s-1","email":"Ann@Example.org","name":" Ann Lee "}`, 201, stored},
			{"replayed", `{"staff_id":"s-1","email":"Ann@Example.org","name":" Ann Lee "}`, 200, stored},
			{"replayed in another case and spacing", `{"staff_id":"s-1","email":" ANN@example.ORG","name":"Ann Lee"}`, 200, stored},
			{"another name", `{"staff_id":"s-1","email":"ann@example.org","name":"Annie"}`, 409,
				map[string]any{"code": "conflicting_replay", "field": "name"}},
			{"another address", `{"staff_id":"s-1","email":"bob@example.org","name":"Ann Lee"}`, 409,
				map[string]any{"code": "already_taken", "field": "staff_id"}},
			{"another id", `{"staff_id":"s-2","email":"ann@example.org","name":"Ann Lee"}`, 409,
				map[string]any{"code": "already_taken", "field": "email"}},
		}
		for _, s := range steps {
			r := send(t, "POST", url+"/staff", s.body)
			require.Equal(t, s.status, r.status, "%s: %s", s.name, r.raw)
			for k, v := range s.want {
				require.Equal(t, v, r.body[k], "%s: %s in %s", s.name, k, r.raw)
			}
		}
		r := send(t, "GET", url+"/staff/s-1", "")
		require.Equal(t, http.StatusOK, r.status, "%s", r.raw)
		require.Equal(t, stored, r.body, "the conflicting replay changed nothing")
		require.Equal(t, 1, staffCount(t, node))
		requireNoBackstop(t, url)
	})
}

// GET /staff/{id} answers the stored member; GET /staff?email= the members
// whose normalised address is the one given (one at most), [] when none.
func TestGetStaff(t *testing.T) {
	t.Parallel()
	onEachBackend(t, app.Config{}, func(t *testing.T, _ *app.Node, url string) {
		r := send(t, "POST", url+"/staff", `{"staff_id":"s-1","email":"Ann@Example.org","name":"Ann"}`)
		require.Equal(t, http.StatusCreated, r.status, "%s", r.raw)
		ann := map[string]any{"staff_id": "s-1", "email": "ann@example.org", "name": "Ann"}

		r = send(t, "GET", url+"/staff/s-1", "")
		require.Equal(t, http.StatusOK, r.status, "%s", r.raw)
		require.Equal(t, ann, r.body)

		r = send(t, "GET", url+"/staff/s-2", "")
		require.Equal(t, http.StatusNotFound, r.status, "%s", r.raw)
		require.Equal(t, "not_found", r.body["code"])
		require.Equal(t, "staff_id", r.body["field"])

		r = send(t, "GET", url+"/staff?email=%20ANN@example.ORG%20", "")
		require.Equal(t, http.StatusOK, r.status, "%s", r.raw)
		require.JSONEq(t, `[{"staff_id":"s-1","email":"ann@example.org","name":"Ann"}]`, string(r.raw))

		r = send(t, "GET", url+"/staff?email=bob@example.org", "")
		require.Equal(t, http.StatusOK, r.status, "%s", r.raw)
		require.JSONEq(t, `[]`, string(r.raw))

		r = send(t, "GET", url+"/staff?email=Bob%20%3Cbob@example.org%3E", "")
		require.Equal(t, http.StatusBadRequest, r.status, "%s", r.raw)
		require.Equal(t, "bad_request", r.body["code"])
	})
}

// /healthz counts the duplicates the staff table's unique index caught
// past the claims: 0 while the claims work.
func TestHealthzBackstopViolations(t *testing.T) {
	t.Parallel()
	_, _, url := sqliteNode(t, app.Config{Name: "n"})
	r := send(t, "GET", url+"/healthz", "")
	require.Equal(t, http.StatusOK, r.status)
	require.Equal(t, map[string]any{"status": "ok", "node": "n", "backend": "sqlite", "backstop_violations": float64(0)}, r.body)
}

// requireNoBackstop requires /healthz to report no backstop violation.
func requireNoBackstop(t *testing.T, url string) {
	t.Helper()
	r := send(t, "GET", url+"/healthz", "")
	require.Equal(t, http.StatusOK, r.status, "%s", r.raw)
	require.Equal(t, float64(0), r.body["backstop_violations"], "%s", r.raw)
}

// A duplicate the claims let through (here a hook writes the row between
// the claim's lookup and the handler) is caught by the unique index,
// answered already_taken, and counted in /healthz.
func TestHealthzCountsBackstop(t *testing.T) {
	t.Parallel()
	var db *sql.DB
	sneak := middleware.Hooks{OnBeforeDispatch: func(ctx context.Context, p *middleware.Pipeline) {
		if c, ok := p.Command.(*commands.CreateStaff); ok && c.StaffID == "s-2" {
			_, err := db.ExecContext(ctx, `INSERT INTO staff (staff_id, email, name) VALUES ('s-sneak', 'race@x.org', 'Sneak')`)
			require.NoError(t, err)
		}
	}}
	_, store, url := sqliteNode(t, app.Config{Middleware: []middleware.Middleware{sneak}})
	db = store.DB()
	requireNoBackstop(t, url)
	r := send(t, "POST", url+"/staff", `{"staff_id":"s-2","email":"race@x.org","name":"Race"}`)
	require.Equal(t, http.StatusConflict, r.status, "%s", r.raw)
	require.Equal(t, "already_taken", r.body["code"])
	require.Equal(t, "email", r.body["field"])
	r = send(t, "GET", url+"/healthz", "")
	require.Equal(t, float64(1), r.body["backstop_violations"], "%s", r.raw)
}
