package faultproxy_test

import (
	"testing"

	"github.com/claimbus/claimbus/internal/pgtest"
)

// TestMain checks that no goroutine outlives the tests (the proxies' and
// pgx's) and stops the throwaway cluster of the PostgreSQL test.
func TestMain(m *testing.M) { pgtest.Main(m) }
