package e2e

import (
	"testing"

	"github.com/claimbus/claimbus/internal/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }
