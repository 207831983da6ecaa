package pgtest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// errNoPgBouncer is returned when the pgbouncer binary cannot be found.
var errNoPgBouncer = errors.New("pgtest: pgbouncer binary not found (looked in $PATH and /usr/sbin)")

// pgbouncerHint tells how to get PgBouncer.
const pgbouncerHint = "install PgBouncer (Debian/Ubuntu: apt-get install pgbouncer)"

// PgBouncer pool modes, for StartPgBouncer.
const (
	PoolSession     = "session"
	PoolTransaction = "transaction"
	PoolStatement   = "statement"
)

// StartPgBouncer starts a PgBouncer in front of c, in pool mode mode
// (PoolSession, PoolTransaction or PoolStatement), and returns the URL of
// c's postgres database through it, as the superuser. The bouncer listens
// on a free port of 127.0.0.1, serves every database of c (a wildcard
// entry) with trust authentication, keeps its default server reuse (the
// most recently used server connection first), and is stopped, and its
// directory removed, when t ends (before c, which was started first).
//
// It runs the pgbouncer binary from $PATH or /usr/sbin, as the postgres
// user when the test runs as root (PgBouncer refuses root). Without the
// binary it skips t (fails it when CI=true). Before PgBouncer 1.21 a pool
// in transaction mode needs pgx's default_query_exec_mode=exec (or
// simple_protocol): pgx's cached prepared statements would land on other
// clients' server connections.
func StartPgBouncer(t testing.TB, c *Cluster, mode string) string {
	t.Helper()
	switch mode {
	case PoolSession, PoolTransaction, PoolStatement:
	default:
		t.Fatalf("pgtest: StartPgBouncer: pool mode %q, want session, transaction or statement", mode)
	}
	bin, err := findPgBouncer()
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("%v; CI=true, so this is a failure: %s", err, pgbouncerHint)
		}
		t.Skipf("%v: %s", err, pgbouncerHint)
	}
	cred, err := runAs()
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	dir, err := os.MkdirTemp("", "pgtest-pgbouncer-")
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	if cred != nil {
		if err := os.Chown(dir, int(cred.Uid), int(cred.Gid)); err != nil {
			t.Fatalf("pgtest: chown %s to the postgres user: %v", dir, err)
		}
	}
	b := &bouncer{bin: bin, cred: cred, dir: dir, logPath: filepath.Join(dir, "pgbouncer.log")}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// A port found free may be taken before the bouncer binds it: retry.
	for attempt := 0; ; attempt++ {
		port, err := freePort()
		if err != nil {
			t.Fatal(err)
		}
		err = b.start(ctx, c.s.port, port, mode)
		if err == nil {
			b.port = port
			break
		}
		if attempt == 4 || !strings.Contains(err.Error(), "in use") {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		if err := b.stop(); err != nil {
			t.Errorf("pgtest: stop pgbouncer: %v", err)
		}
	})
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", b.port)
}

// findPgBouncer looks for pgbouncer on PATH, then in /usr/sbin (Debian
// installs it there, off a normal user's PATH).
func findPgBouncer() (string, error) {
	if p, err := exec.LookPath("pgbouncer"); err == nil {
		return p, nil
	}
	if p := "/usr/sbin/pgbouncer"; isExecutable(p) {
		return p, nil
	}
	return "", errNoPgBouncer
}

// bouncer is one running PgBouncer.
type bouncer struct {
	bin     string
	cred    *syscall.Credential
	dir     string
	logPath string
	port    int

	proc   *exec.Cmd
	exited chan struct{}
}

// iniTemplate is the bouncer's configuration: the server's port, the
// directory, the listen port and the pool mode.
const iniTemplate = `[databases]
* = host=127.0.0.1 port=%d

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = %[3]d
unix_socket_dir =
auth_type = trust
auth_file = %[2]s/userlist.txt
pool_mode = %[4]s
max_client_conn = 500
default_pool_size = 50
ignore_startup_parameters = extra_float_digits
logfile = %[2]s/pgbouncer.log
log_connections = 0
log_disconnections = 0
`

// start writes the configuration and runs the bouncer on listenPort in
// front of the server on serverPort, and waits until it accepts
// connections (and reaches the server).
func (b *bouncer) start(ctx context.Context, serverPort, listenPort int, mode string) error {
	ini := filepath.Join(b.dir, "pgbouncer.ini")
	files := map[string]string{
		ini:                                  fmt.Sprintf(iniTemplate, serverPort, b.dir, listenPort, mode),
		filepath.Join(b.dir, "userlist.txt"): `"postgres" ""` + "\n",
	}
	for path, text := range files {
		if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
			return fmt.Errorf("pgtest: %w", err)
		}
		if b.cred != nil {
			if err := os.Chown(path, int(b.cred.Uid), int(b.cred.Gid)); err != nil {
				return fmt.Errorf("pgtest: chown %s: %w", path, err)
			}
		}
	}
	cmd := exec.Command(b.bin, ini)
	var stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stderr, &stderr
	cmd.Env = serverEnv()
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: b.cred, Pdeathsig: syscall.SIGKILL, Setpgid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("pgtest: start %s: %w", b.bin, err)
	}
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(exited)
	}()
	b.proc, b.exited = cmd, exited

	dsn := "host=127.0.0.1 port=" + strconv.Itoa(listenPort) + " user=postgres dbname=postgres sslmode=disable"
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-exited:
			b.proc, b.exited = nil, nil
			return fmt.Errorf("pgtest: pgbouncer exited at start (%s):\n%s%s", cmd.ProcessState, stderr.Bytes(), b.logTail())
		case <-ctx.Done():
			_ = b.stop()
			return fmt.Errorf("pgtest: pgbouncer not ready: %w\n%s", ctx.Err(), b.logTail())
		case <-tick.C:
		}
		if ping(ctx, dsn) == nil {
			return nil
		}
	}
}

// stop ends the bouncer (SIGTERM: immediate shutdown, clients are
// disconnected), killing it when it has not exited within 10s.
func (b *bouncer) stop() error {
	if b.proc == nil {
		return nil
	}
	proc, exited := b.proc, b.exited
	b.proc, b.exited = nil, nil
	_ = proc.Process.Signal(syscall.SIGTERM)
	select {
	case <-exited:
		return nil
	case <-time.After(10 * time.Second):
	}
	_ = syscall.Kill(-proc.Process.Pid, syscall.SIGKILL)
	<-exited
	return errors.New("pgtest: pgbouncer did not stop within 10s, killed")
}

// logTail returns the end of the bouncer's log, for error messages.
func (b *bouncer) logTail() []byte {
	data, _ := os.ReadFile(b.logPath)
	if len(data) > 4000 {
		data = data[len(data)-4000:]
	}
	return data
}
