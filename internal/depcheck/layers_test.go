package depcheck

import (
	"fmt"
	"maps"
	"os/exec"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// module is the import path every package of ours starts with.
const module = "github.com/claimbus/claimbus"

// anything marks a row whose package may import every package of the
// module: the programs and end-to-end tests at the top, which use
// everything.
const anything = "*"

// leaves are the internal packages that import nothing of the module
// (their rows say so, and the test checks it): any package may import
// them, since an import of one can never point up a layer.
var leaves = []string{"internal/afterlost", "internal/keyqueue", "internal/lockext", "internal/observe", "internal/wire", "internal/claimtx", "lockstore/internal/effects"}

// rule is one row of the layering: the packages of the module (paths
// relative to it) that a package's non-test files may import, and why.
type rule struct {
	may []string
	why string
}

// layers is the module's one-way dependencies as a table: every package
// of the module has a row, and its non-test files import only the packages
// of the module its row lists, and the leaves. Test files are not held to it: a layer's
// tests drive it through the layers above it, as its users do (uniqueness
// through the bus), and no user compiles them. A package without a row
// fails the test, so a new package is placed deliberately.
var layers = map[string]rule{
	// The core, bottom up.
	"commands":  {why: "the command types: imports nothing of ours, so every layer may"},
	"lockstore": {why: "the lock contract at the bottom: imports nothing of ours"},
	"claimstore": {
		may: []string{"lockstore", "claimstore/internal/claimcheck"},
		why: "durable claims sit beside lockstore, below middleware",
	},
	"middleware": {
		may: []string{"lockstore"},
		why: "the middleware takes locks; the bus and uniqueness sit above it",
	},
	"uniqueness": {
		may: []string{"middleware", "lockstore", "claimstore"},
		why: "claims on unique values: a middleware on locks and durable claims (claimstore); never the bus",
	},
	"idempotency": {
		may: []string{"middleware", "lockstore", "claimstore"},
		why: "a middleware on the claim store, beside uniqueness; never the bus",
	},
	"txcommand": {
		may: []string{"middleware", "lockstore", "lockstore/postgres", "lockstore/sqlite", "claimstore", "claimstore/postgres", "claimstore/sqlite", "idempotency", "uniqueness"},
		why: "commands in one SQL transaction: the middleware on the PostgreSQL or SQLite stores, beside uniqueness and idempotency; never the bus",
	},
	"bus": {
		may: []string{"middleware"},
		why: "the bus runs middleware; it knows no store and no built-in middleware",
	},
	"telemetry": {
		may: []string{"lockstore", "middleware", "uniqueness"},
		why: "telemetry lives in its own package; the core packages never import it",
	},

	// Backends: a heavy dependency stays in its own subpackage.
	"lockstore/postgres": {
		may: []string{"lockstore", "lockstore/internal/txnest", "internal/migrate"},
		why: "a lockstore backend: the store's contract, its transaction nesting and the shared migrations, nothing above",
	},
	"lockstore/sqlite": {
		may: []string{"lockstore", "lockstore/internal/txnest", "internal/migrate", "internal/sqlitegate"},
		why: "a lockstore backend: the store's contract, its transaction nesting, the shared migrations and the database's write gate, nothing above",
	},
	"claimstore/postgres": {
		may: []string{"claimstore", "lockstore", "claimstore/internal/claimcheck", "internal/migrate", "internal/pgerr"},
		why: "a claimstore backend: the store's contract and the shared helpers, nothing above",
	},
	"claimstore/sqlite": {
		may: []string{"claimstore", "lockstore", "claimstore/internal/claimcheck", "internal/migrate", "internal/sqlitegate"},
		why: "a claimstore backend: the store's contract and the shared helpers, nothing above",
	},
	"bus/sqltransport": {
		may: []string{"bus", "bus/internal/transport", "middleware", "internal/pgerr"},
		why: "a transport of the bus: the bus and its wire format, no store",
	},
	"bus/natstransport": {
		may: []string{"bus", "bus/internal/transport", "middleware"},
		why: "a transport of the bus: the bus and its wire format, no store",
	},

	// Exported test support: the contract it checks, nothing of a backend.
	"lockstore/lockstoretest": {
		may: []string{"lockstore", "internal/testwait"},
		why: "the lockstore conformance suite: the contract only, so every backend can run it",
	},
	"claimstore/claimstoretest": {
		may: []string{"claimstore", "lockstore"},
		why: "the claimstore conformance suite: the contract only, so every backend can run it",
	},
	"bus/bustest": {
		may: []string{"bus", "middleware", "lockstore", "claimstore", "uniqueness", "internal/testwait"},
		why: "the transport suite and test support for users: a bus on memory stores, no backend",
	},
	"telemetry/telemetrytest": {
		may: []string{"telemetry"},
		why: "test support for telemetry users",
	},

	// Internal leaves (see leaves): nothing of the module.
	"internal/wire": {
		why: "the metadata keys and the rejection encoding, imported by middleware and the bus, so it imports neither",
	},
	"internal/keyqueue": {
		why: "the per-key FIFO queue of lockstore, its backends and uniqueness: standard library only",
	},
	"internal/afterlost": {why: "the lost-lock callbacks the stores and middleware share: standard library only"},
	"internal/observe":   {why: "the hooks through which the core reports the steps of a command to telemetry: standard library only"},

	"internal/claimtx":           {why: "hands txcommand the claim stores' statements for the handler's transaction, set by each store: standard library only"},
	"lockstore/internal/effects": {why: "what a lock store's transaction carries in its context (AfterCommit scopes, the fencing token): standard library only"},

	"internal/lockext": {why: "what a lock store may offer beyond lockstore.Locker (key order, release without a wait, probe): standard library only, it names lockstore.Key by its shape"},

	// A layer's own internal packages: shared by its backends, importing
	// the layer and what it may.
	"lockstore/internal/txnest": {
		may: []string{"lockstore"},
		why: "the transaction nesting both SQL lockstore backends share",
	},
	"bus/internal/transport": {
		may: []string{"bus"},
		why: "what the transports of the bus share",
	},
	"bus/internal/crashtest": {
		may: []string{"bus", "internal/testwait"},
		why: "what the transports' tests share to crash a node",
	},
	"claimstore/internal/claimcheck": {
		may: []string{"lockstore"},
		why: "the argument checks and errors claimstore and its backends share",
	},

	// The module's other internal packages: below every layer, so they
	// import only each other (TestImportsFollowTheLayers checks it).
	"internal/migrate": {why: "the migrations the SQL backends share"},
	"internal/migrate/migratetest": {
		may: []string{"internal/migrate"},
		why: "test support for internal/migrate",
	},
	"internal/pgerr":      {why: "PostgreSQL error predicates the SQL backends share"},
	"internal/sqlitegate": {why: "the write gate the SQLite backends share on one database handle"},
	"internal/pgtest":     {why: "the throwaway PostgreSQL of the tests"},
	"internal/testwait":   {why: "the tests' poll for conditions that assert on t: standard library only"},
	"internal/testlog":    {why: "the tests' log sink: standard library only"},
	"internal/natstest":   {why: "the in-process NATS server of the tests"},
	"internal/faultproxy": {why: "the TCP fault proxy of the tests"},
	"internal/depcheck":   {why: "this test"},
	"internal/cmd/counts": {why: "a program: the module's size counts, standard library only"},

	// The top: programs and end-to-end tests.
	"example_app":     {may: []string{anything}, why: "a program: the example app uses everything"},
	"example_app/app": {may: []string{anything}, why: "a program: the example app uses everything"},
	"example_app/internal/storm": {
		may: []string{"uniqueness"},
		why: "the example app's load generator: it drives the app over HTTP",
	},
	"example_app/internal/floor": {
		may: []string{"uniqueness"},
		why: "the floor server the example app is measured against: net/http and pgxpool, with the app's email normalisation",
	},
	"example_app/internal/floor/cmd/floor": {
		may: []string{"example_app/internal/floor"},
		why: "the floor server's command",
	},
	"example_app/internal/storm/stormtest": {
		may: []string{"uniqueness"},
		why: "test support for the load generator",
	},
	"examples/quickstart": {may: []string{anything}, why: "a program: the README's quick start"},
	"examples/cqrsapp":    {may: []string{anything}, why: "a program: a cqrs app adopting claimbus"},
	"test":                {may: []string{anything}, why: "the end-to-end tests use everything"},
}

// violations checks graph (package → the packages of the module its
// non-test files import, all relative to the module) against table, and
// describes every package without a row and every import its row does not
// allow.
func violations(graph map[string][]string, table map[string]rule) []string {
	var out []string
	for _, pkg := range slices.Sorted(maps.Keys(graph)) {
		r, ok := table[pkg]
		if !ok {
			out = append(out, fmt.Sprintf("%s has no row in internal/depcheck's layers: add one saying which packages of the module it may import, and why", pkg))
			continue
		}
		if slices.Contains(r.may, anything) {
			continue
		}
		leaf := slices.Contains(leaves, pkg)
		for _, imp := range graph[pkg] {
			if !slices.Contains(r.may, imp) && (leaf || !slices.Contains(leaves, imp)) {
				out = append(out, fmt.Sprintf("%s imports %s, which its row does not allow: it may import %s (%s)", pkg, imp, allowed(r, leaf), r.why))
			}
		}
	}
	return out
}

// allowed lists what a row allows, for a message; leaf says whether the
// row is a leaf's, which may not import the other leaves.
func allowed(r rule, leaf bool) string {
	switch {
	case leaf:
		return "nothing of the module, as a leaf"
	case len(r.may) == 0:
		return "only the internal leaves"
	}
	return strings.Join(r.may, ", ") + " and the internal leaves"
}

// importGraph lists every package of the module with the packages of the
// module its non-test files import, relative to the module.
func importGraph(t *testing.T) map[string][]string {
	t.Helper()
	// go test puts its own GOROOT/bin first on the test's PATH.
	gobin, err := exec.LookPath("go")
	require.NoError(t, err, "go is not on PATH: cannot run go list")
	out, err := exec.Command(gobin, "list", "-f", `{{.ImportPath}} {{join .Imports " "}}`, module+"/...").CombinedOutput()
	require.NoError(t, err, "go list %s/...:\n%s", module, out)
	graph := map[string][]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		fields := strings.Fields(line)
		pkg, ok := relative(fields[0])
		require.True(t, ok, "go list printed %q, outside the module", fields[0])
		graph[pkg] = []string{}
		for _, imp := range fields[1:] {
			if rel, ok := relative(imp); ok {
				graph[pkg] = append(graph[pkg], rel)
			}
		}
	}
	return graph
}

// relative returns path relative to the module, and whether it is in it.
func relative(path string) (string, bool) {
	if rest, ok := strings.CutPrefix(path, module+"/"); ok {
		return rest, true
	}
	return "", false
}

func TestImportsFollowTheLayers(t *testing.T) {
	graph := importGraph(t)
	require.Contains(t, graph, "middleware", "go list printed no import graph")
	require.Contains(t, graph, "internal/depcheck", "go list printed no import graph")
	for _, leaf := range leaves {
		require.Empty(t, layers[leaf].may, "%s is a leaf: its row allows nothing", leaf)
	}
	for pkg, r := range layers {
		if strings.HasPrefix(pkg, "internal/") {
			for _, imp := range r.may {
				require.True(t, strings.HasPrefix(imp, "internal/"),
					"%s may import %s: the module's internal packages sit below every layer, so they import only each other (an internal package of one layer lives under it, as claimstore/internal/claimcheck does)", pkg, imp)
			}
		}
	}
	for _, v := range violations(graph, layers) {
		t.Error(v)
	}
}

// The checker itself: a wrong import and a package without a row fail,
// named with the package, the import and the rule.
func TestViolationsNameThePackageTheImportAndTheRule(t *testing.T) {
	graph := map[string][]string{
		"lockstore":    {},
		"middleware":   {"lockstore", "bus"},
		"bus":          {"middleware"},
		"internal/new": {"lockstore"},
		"test":         {"bus", "middleware", "internal/new"},
	}
	require.Equal(t, []string{
		"internal/new has no row in internal/depcheck's layers: add one saying which packages of the module it may import, and why",
		"middleware imports bus, which its row does not allow: it may import lockstore and the internal leaves (the middleware takes locks; the bus and uniqueness sit above it)",
	}, violations(graph, layers))

	require.Equal(t, []string{
		"internal/wire imports internal/keyqueue, which its row does not allow: it may import nothing of the module, as a leaf (the metadata keys and the rejection encoding, imported by middleware and the bus, so it imports neither)",
		"lockstore imports middleware, which its row does not allow: it may import only the internal leaves (the lock contract at the bottom: imports nothing of ours)",
	}, violations(map[string][]string{"lockstore": {"middleware", "internal/afterlost"}, "internal/wire": {"internal/keyqueue"}}, layers))
	require.Empty(t, violations(map[string][]string{"bus": {"middleware", "internal/wire"}, "lockstore": {"internal/afterlost"}}, layers))
}
