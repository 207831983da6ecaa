package depcheck

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// heavy are the import path fragments of dependencies that only the backend
// subpackages (lockstore/postgres, lockstore/sqlite, claimstore/postgres,
// claimstore/sqlite, bus/sqltransport, bus/natstransport) and telemetry may
// pull in.
var heavy = []string{"pgx", "sqlite", "modernc.org", "watermill-sql", "lib/pq", "nats", "opentelemetry"}

// light are the packages whose dependency graph must contain none of them:
// a user of the memory store and GoChannel never compiles a backend.
var light = []string{
	"github.com/claimbus/claimbus/lockstore",
	"github.com/claimbus/claimbus/claimstore",
	"github.com/claimbus/claimbus/claimstore/claimstoretest",
	"github.com/claimbus/claimbus/middleware",
	"github.com/claimbus/claimbus/uniqueness",
	"github.com/claimbus/claimbus/idempotency",
	"github.com/claimbus/claimbus/bus",
	"github.com/claimbus/claimbus/commands",
	"github.com/claimbus/claimbus/internal/observe",
}

func TestLightPackagesDoNotDependOnHeavyOnes(t *testing.T) {
	// go test puts its own GOROOT/bin first on the test's PATH.
	gobin, err := exec.LookPath("go")
	require.NoError(t, err, "go is not on PATH: cannot run go list")
	for _, pkg := range light {
		out, err := exec.Command(gobin, "list", "-deps", pkg).CombinedOutput()
		require.NoError(t, err, "go list -deps %s:\n%s", pkg, out)
		deps := strings.Fields(string(out))
		require.Contains(t, deps, pkg, "go list printed no dependency list")
		for _, dep := range deps {
			for _, h := range heavy {
				require.NotContains(t, dep, h, "%s depends on %s", pkg, dep)
			}
		}
	}
}
