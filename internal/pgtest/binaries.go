package pgtest

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// errNoBinaries is returned when initdb and postgres cannot be found.
var errNoBinaries = errors.New("pgtest: PostgreSQL server binaries (initdb, postgres) not found")

// installHint tells how to get the server binaries.
const installHint = "install the PostgreSQL server (Debian/Ubuntu: apt-get install postgresql; " +
	"the binaries are looked up in $PGTEST_BINDIR, /usr/lib/postgresql/*/bin (newest first), then PATH), " +
	"or point TEST_DATABASE_URL at a server you own (superuser, URL form)"

// binaries are the absolute paths of the server programs pgtest runs.
type binaries struct {
	initdb   string
	postgres string
}

// findBinaries looks for initdb and postgres in $PGTEST_BINDIR, then in the
// newest /usr/lib/postgresql/<version>/bin, then on PATH.
func findBinaries() (binaries, error) {
	var dirs []string
	if d := os.Getenv("PGTEST_BINDIR"); d != "" {
		dirs = append(dirs, d)
	}
	matches, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	slices.SortFunc(matches, func(a, b string) int {
		return versionOf(b) - versionOf(a) // newest first
	})
	dirs = append(dirs, matches...)
	for _, d := range dirs {
		b := binaries{initdb: filepath.Join(d, "initdb"), postgres: filepath.Join(d, "postgres")}
		if isExecutable(b.initdb) && isExecutable(b.postgres) {
			return b, nil
		}
	}
	pg, err := exec.LookPath("postgres")
	if err == nil {
		initdb := filepath.Join(filepath.Dir(pg), "initdb")
		if !isExecutable(initdb) {
			initdb, err = exec.LookPath("initdb")
		}
		if err == nil {
			return binaries{initdb: initdb, postgres: pg}, nil
		}
	}
	return binaries{}, errNoBinaries
}

// versionOf returns the major version in /usr/lib/postgresql/<version>/bin,
// or -1.
func versionOf(binDir string) int {
	v, err := strconv.Atoi(filepath.Base(filepath.Dir(binDir)))
	if err != nil {
		return -1
	}
	return v
}

func isExecutable(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && !fi.IsDir() && fi.Mode()&0o111 != 0
}

// skipOrFail ends the test when the binaries are missing: t.Fatal when CI
// is "true" (a CI run must not pass by skipping), t.Skip elsewhere. Any
// other error fails the test.
func skipOrFail(t testing.TB, err error) {
	t.Helper()
	if !errors.Is(err, errNoBinaries) {
		t.Fatalf("pgtest: %v", err)
	}
	if os.Getenv("CI") == "true" {
		t.Fatalf("%v; CI=true, so this is a failure: %s", err, installHint)
	}
	t.Skipf("%v: %s", err, installHint)
}

// runAs returns the credentials the server runs under: nil (the current
// user) unless the process is root, which initdb and postgres refuse; then
// the "postgres" user.
func runAs() (*syscall.Credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		return nil, fmt.Errorf("running as root, the server must run as the postgres user: %w", err)
	}
	uid, err1 := strconv.ParseUint(u.Uid, 10, 32)
	gid, err2 := strconv.ParseUint(u.Gid, 10, 32)
	if err := errors.Join(err1, err2); err != nil {
		return nil, fmt.Errorf("postgres user ids %q/%q: %w", u.Uid, u.Gid, err)
	}
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, nil
}

// serverEnv is the environment of the server processes: ours without the
// libpq/server variables (PGDATA, PGPORT, ...) that would redirect them.
func serverEnv() []string {
	env := slices.DeleteFunc(os.Environ(), func(kv string) bool {
		return strings.HasPrefix(kv, "PG") && !strings.HasPrefix(kv, "PGTEST_")
	})
	return append(env, "LC_ALL=C")
}
