package postgres_test

import (
	"testing"

	"github.com/claimbus/claimbus/internal/pgtest"
)

// TestMain checks for leaked goroutines (goleak) and stops the throwaway
// PostgreSQL, if pgtest started one.
func TestMain(m *testing.M) { pgtest.Main(m) }
