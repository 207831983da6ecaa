package idempotency_test

import (
	"testing"

	"github.com/claimbus/claimbus/internal/pgtest"
)

// TestMain checks for leaked goroutines and stops the throwaway PostgreSQL
// cluster of the PostgreSQL tests, if one was started.
func TestMain(m *testing.M) { pgtest.Main(m) }
