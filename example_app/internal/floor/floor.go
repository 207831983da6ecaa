// Package floor is the floor under example_app's POST /staff: a plain
// net/http server on a pgxpool that inserts each member with INSERT ... ON
// CONFLICT DO NOTHING on the staff table's unique index, and nothing
// else. It answers what example_app storm sends and checks (POST /staff,
// GET /staff?email=X, GET /healthz) as the example does, so that storm
// can measure it beside serve on the same PostgreSQL.
package floor

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/claimbus/claimbus/uniqueness"
)

// Schema is the example's staff table and its unique index on email.
var Schema = []string{
	`CREATE TABLE IF NOT EXISTS staff (staff_id TEXT PRIMARY KEY, email TEXT NOT NULL, name TEXT NOT NULL)`,
	`CREATE UNIQUE INDEX IF NOT EXISTS staff_email_key ON staff (email)`,
}

// Create makes the Schema on pool.
func Create(ctx context.Context, pool *pgxpool.Pool) error {
	for _, ddl := range Schema {
		if _, err := pool.Exec(ctx, ddl); err != nil {
			return err
		}
	}
	return nil
}

type staff struct {
	StaffID string `db:"staff_id" json:"staff_id"`
	Email   string `db:"email"    json:"email"`
	Name    string `db:"name"     json:"name"`
}

// Handler is the whole floor server.
func Handler(pool *pgxpool.Pool) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /staff", func(w http.ResponseWriter, r *http.Request) {
		var s staff
		if err := json.NewDecoder(r.Body).Decode(&s); err != nil || s.StaffID == "" || s.Email == "" {
			reply(w, http.StatusBadRequest, map[string]string{"code": "invalid"})
			return
		}
		s.Email, s.Name = uniqueness.NormalizeEmail(s.Email), strings.TrimSpace(s.Name)
		tag, err := pool.Exec(r.Context(), `INSERT INTO staff (staff_id, email, name) VALUES ($1, $2, $3) ON CONFLICT (email) DO NOTHING`, s.StaffID, s.Email, s.Name)
		switch {
		case err != nil:
			reply(w, http.StatusInternalServerError, map[string]string{"code": "internal"})
		case tag.RowsAffected() == 0:
			reply(w, http.StatusConflict, map[string]string{"code": "already_taken", "field": "email"})
		default:
			reply(w, http.StatusCreated, s)
		}
	})
	mux.HandleFunc("GET /staff", func(w http.ResponseWriter, r *http.Request) {
		rows, _ := pool.Query(r.Context(), `SELECT staff_id, email, name FROM staff WHERE email = $1`, uniqueness.NormalizeEmail(r.URL.Query().Get("email")))
		list, err := pgx.CollectRows(rows, pgx.RowToStructByName[staff])
		if err != nil {
			reply(w, http.StatusInternalServerError, map[string]string{"code": "internal"})
			return
		}
		reply(w, http.StatusOK, append([]staff{}, list...))
	})
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		status := "ok"
		if pool.Ping(r.Context()) != nil {
			status = "unavailable"
		}
		reply(w, http.StatusOK, map[string]any{"status": status, "node": "floor", "backend": "postgres", "backstop_violations": 0})
	})
	return mux
}

func reply(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}
