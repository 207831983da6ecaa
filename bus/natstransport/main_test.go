package natstransport_test

import (
	"testing"

	"github.com/claimbus/claimbus/internal/pgtest"
)

// goleak (through pgtest.Main) checks that every transport, bus and
// in-process NATS server of the tests stopped its goroutines.
func TestMain(m *testing.M) { pgtest.Main(m) }
