package pgtest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

// settings tune a throwaway cluster for tests: durability off, room for many
// connections, no background work competing with the tests.
var settings = []string{
	"listen_addresses=127.0.0.1",
	"fsync=off",
	"synchronous_commit=off",
	"full_page_writes=off",
	"max_connections=300",
	"shared_buffers=64MB",
	"autovacuum=off",
	"log_min_messages=warning",
}

// reaperScript runs beside each cluster. Its stdin is a pipe whose write end
// only the test binary holds, so read returns when the binary closes it or
// dies, however it dies. Then it kills whatever postmaster the data
// directory names (and its process group), waits for it to go, and removes
// the directory.
const reaperScript = `read -r _
pid=$(head -n 1 "$1/data/postmaster.pid" 2>/dev/null)
case "$pid" in
''|*[!0-9]*) ;;
*) kill -KILL -- "-$pid" 2>/dev/null
   while kill -0 -- "-$pid" 2>/dev/null; do sleep 0.05; done ;;
esac
rm -rf "$1"`

// server is one PostgreSQL cluster in a temporary directory, run from the
// system's binaries.
type server struct {
	bin     binaries
	cred    *syscall.Credential
	dir     string // removed by destroy (or by the reaper)
	dataDir string
	sockDir string
	logPath string
	port    int
	extra   []string // name=value settings after ours, at every start

	reaper  *exec.Cmd
	reaperW *os.File // closing it makes the reaper clean up

	mu     sync.Mutex
	proc   *exec.Cmd     // the running postmaster, nil when stopped
	exited chan struct{} // closed when proc has exited
}

// newServer initialises a cluster in a fresh temporary directory and starts
// it on a free port of 127.0.0.1, with pgtest's settings followed by extra
// (name=value each). On error nothing is left behind.
func newServer(ctx context.Context, extra []string) (_ *server, err error) {
	bin, err := findBinaries()
	if err != nil {
		return nil, err
	}
	cred, err := runAs()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "pgtest-")
	if err != nil {
		return nil, fmt.Errorf("pgtest: %w", err)
	}
	s := &server{
		bin:     bin,
		cred:    cred,
		dir:     dir,
		dataDir: filepath.Join(dir, "data"),
		sockDir: filepath.Join(dir, "sock"),
		logPath: filepath.Join(dir, "postgres.log"),
		extra:   extra,
	}
	if err := s.startReaper(); err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	defer func() {
		if err != nil {
			_ = s.destroy(context.Background())
		}
	}()
	if err := os.Mkdir(s.sockDir, 0o700); err != nil {
		return nil, fmt.Errorf("pgtest: %w", err)
	}
	if cred != nil {
		for _, p := range []string{dir, s.sockDir} {
			if err := os.Chown(p, int(cred.Uid), int(cred.Gid)); err != nil {
				return nil, fmt.Errorf("pgtest: chown %s to the postgres user: %w", p, err)
			}
		}
	}
	if err := s.initdb(ctx); err != nil {
		return nil, err
	}
	// A port found free may be taken before the server binds it: retry.
	for attempt := 0; ; attempt++ {
		s.port, err = freePort()
		if err != nil {
			return nil, err
		}
		err = s.start(ctx)
		if err == nil || attempt == 4 || !bytes.Contains(s.logTail(), []byte("could not bind")) {
			return s, err
		}
	}
}

// startReaper starts the process that removes the cluster if the test
// binary dies without cleaning up (see reaperScript).
func (s *server) startReaper() error {
	r, w, err := os.Pipe()
	if err != nil {
		return fmt.Errorf("pgtest: %w", err)
	}
	defer func() { _ = r.Close() }()
	cmd := exec.Command("/bin/sh", "-c", reaperScript, "pgtest-reaper", s.dir)
	cmd.Stdin = r
	// Its own process group: a ^C aimed at the test binary must not kill
	// the reaper before it has cleaned up.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		_ = w.Close()
		return fmt.Errorf("pgtest: start the reaper: %w", err)
	}
	s.reaper, s.reaperW = cmd, w
	return nil
}

func (s *server) initdb(ctx context.Context) error {
	cmd := exec.CommandContext(ctx, s.bin.initdb,
		"--pgdata="+s.dataDir, "--username=postgres", "--auth=trust",
		"--encoding=UTF8", "--no-locale", "--no-sync")
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: s.cred, Pdeathsig: syscall.SIGKILL}
	cmd.Env = serverEnv()
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("pgtest: %s: %w\n%s", s.bin.initdb, err, out)
	}
	return nil
}

// freePort returns a TCP port of 127.0.0.1 that was free a moment ago.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("pgtest: find a free port: %w", err)
	}
	defer func() { _ = l.Close() }()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// dsn is the URL of database db on this server, as the postgres superuser.
func (s *server) dsn(db string) string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/%s?sslmode=disable", s.port, db)
}

// socketDSN reaches the postgres database through the server's own unix
// socket directory.
func (s *server) socketDSN() string {
	return fmt.Sprintf("host=%s port=%d user=postgres dbname=postgres", s.sockDir, s.port)
}

// start runs the postmaster and waits until it accepts connections.
func (s *server) start(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc != nil {
		return errors.New("pgtest: the server is already running")
	}
	args := []string{"-D", s.dataDir, "-p", strconv.Itoa(s.port), "-k", s.sockDir}
	// The extra settings come last: of two -c for one name, the last wins.
	for _, kv := range append(slices.Clip(settings), s.extra...) {
		args = append(args, "-c", kv)
	}
	logf, err := os.OpenFile(s.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("pgtest: %w", err)
	}
	cmd := exec.Command(s.bin.postgres, args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.Env = serverEnv()
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Credential: s.cred,
		// Killed with the test binary (precisely: with the OS thread that
		// started it, see go.dev/issue/27505; the reaper covers the rest).
		Pdeathsig: syscall.SIGKILL,
		// Its own process group, so that the reaper can kill the backends
		// too, and a ^C reaches the test binary only.
		Setpgid: true,
	}
	err = cmd.Start()
	_ = logf.Close()
	if err != nil {
		return fmt.Errorf("pgtest: start %s: %w", s.bin.postgres, err)
	}
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(exited)
	}()
	s.proc, s.exited = cmd, exited

	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-exited:
			s.proc, s.exited = nil, nil
			return fmt.Errorf("pgtest: postgres exited at start (%s):\n%s", cmd.ProcessState, s.logTail())
		case <-ctx.Done():
			_ = s.haltLocked(context.Background(), syscall.SIGINT)
			return fmt.Errorf("pgtest: postgres not ready: %w\n%s", ctx.Err(), s.logTail())
		case <-tick.C:
		}
		// Through our own socket directory: a TCP ping could reach another
		// server that took the port first.
		if ping(ctx, s.socketDSN()) == nil {
			return nil
		}
	}
}

// ping connects once and closes the connection.
func ping(ctx context.Context, dsn string) error {
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	c, err := pgconn.Connect(ctx, dsn)
	if err != nil {
		return err
	}
	return c.Close(ctx)
}

// stop shuts the server down (fast shutdown: sessions are disconnected, the
// cluster is left clean). When ctx ends first it kills the process group.
// Stopping a stopped server is a no-op.
func (s *server) stop(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.haltLocked(ctx, syscall.SIGINT)
}

// crash stops the server as pg_ctl stop -m immediate does: SIGQUIT makes
// the postmaster quit its children and exit without a checkpoint, so the
// next start runs crash recovery. When ctx ends first it kills the process
// group. Crashing a stopped server is a no-op.
func (s *server) crash(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.haltLocked(ctx, syscall.SIGQUIT)
}

// haltLocked sends sig to the postmaster (SIGINT: fast shutdown, SIGQUIT:
// immediate shutdown) and waits until it has exited, killing its process
// group when ctx ends first.
func (s *server) haltLocked(ctx context.Context, sig syscall.Signal) error {
	if s.proc == nil {
		return nil
	}
	proc, exited := s.proc, s.exited
	s.proc, s.exited = nil, nil
	_ = proc.Process.Signal(sig)
	select {
	case <-exited:
		return nil
	case <-ctx.Done():
	}
	_ = syscall.Kill(-proc.Process.Pid, syscall.SIGKILL)
	<-exited
	return fmt.Errorf("pgtest: postgres did not stop in time, killed: %w", ctx.Err())
}

// destroy stops the server and removes its directory, through the reaper.
func (s *server) destroy(ctx context.Context) error {
	err := s.stop(ctx)
	if s.reaperW != nil {
		_ = s.reaperW.Close()
		err = errors.Join(err, s.reaper.Wait())
		s.reaperW = nil
	}
	if _, statErr := os.Stat(s.dir); !errors.Is(statErr, os.ErrNotExist) {
		err = errors.Join(err, os.RemoveAll(s.dir))
	}
	return err
}

// logTail returns the end of the server's log, for error messages.
func (s *server) logTail() []byte {
	b, _ := os.ReadFile(s.logPath)
	if len(b) > 4000 {
		b = b[len(b)-4000:]
	}
	return b
}
