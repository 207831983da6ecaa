package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

// This file is example_app pg: a throwaway PostgreSQL server for trying
// several serve nodes on one database, started as internal/pgtest starts
// the tests' (which is test support, so not used here): initdb into a
// temporary directory, postgres on 127.0.0.1 and a free port, as the
// postgres user when run as root. Ctrl-C stops it and removes the
// directory.

// pgStopTimeout bounds the fast shutdown of the server before its process
// group is killed.
const pgStopTimeout = 15 * time.Second

// pgCmd runs example_app pg. It returns 0 once the server it started has
// stopped cleanly and its directory is gone, 1 when it could not start or
// stop, 2 for a usage error.
func pgCmd(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("example_app pg", flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprint(stderr, "usage: example_app pg [flags]\n\n"+
			"Starts a throwaway PostgreSQL server (initdb into a temporary directory, on 127.0.0.1)\n"+
			"from the binaries of `apt-get install postgresql` (/usr/lib/postgresql/*/bin or PATH),\n"+
			"prints the postgres:// URL to give serve's -db, and runs until Ctrl-C, which stops\n"+
			"the server and removes its directory.\n\n")
		fs.PrintDefaults()
	}
	port := fs.Int("port", 0, "TCP `port` on 127.0.0.1; 0 picks a free one")
	if ok, code := parseFlags(fs, args, stderr); !ok {
		return code
	}
	if fs.NArg() > 0 || *port < 0 || *port > 65535 {
		fmt.Fprintf(stderr, "example_app pg: bad flags: want only -port 0..65535, got %q\n", args)
		return 2
	}

	s, err := startPG(ctx, *port)
	if err != nil {
		fmt.Fprintln(stderr, "example_app pg:", err)
		return 1
	}
	fmt.Fprintf(stdout, "example_app pg: PostgreSQL %s in %s\n", s.url, s.dir)
	fmt.Fprintf(stdout, "example_app pg: try  go run ./example_app serve -node a -addr 127.0.0.1:8081 -db '%s'\n", s.url)
	fmt.Fprintln(stdout, "example_app pg: Ctrl-C stops it and removes the directory")

	select {
	case <-ctx.Done():
	case <-s.exited:
		fmt.Fprintf(stderr, "example_app pg: postgres exited on its own (%s):\n%s", s.cmd.ProcessState, s.logTail())
		_ = os.RemoveAll(s.dir)
		return 1
	}
	if err := s.stop(); err != nil {
		fmt.Fprintln(stderr, "example_app pg:", err)
		return 1
	}
	fmt.Fprintf(stdout, "example_app pg: stopped, %s removed\n", s.dir)
	return 0
}

// pgServer is a running throwaway server.
type pgServer struct {
	dir, url string
	cmd      *exec.Cmd
	exited   chan struct{} // closed once postgres has exited
}

// startPG initialises a cluster in a fresh temporary directory and starts
// it on 127.0.0.1:port (a free port when 0). On error nothing is left
// behind.
func startPG(ctx context.Context, port int) (_ *pgServer, err error) {
	initdb, postgres, err := pgBinaries()
	if err != nil {
		return nil, err
	}
	attr, uid, gid, err := pgProcAttr()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "example_app-pg-")
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			_ = os.RemoveAll(dir)
		}
	}()
	data, sock, logPath := filepath.Join(dir, "data"), filepath.Join(dir, "sock"), filepath.Join(dir, "postgres.log")
	if err := os.Mkdir(sock, 0o700); err != nil {
		return nil, err
	}
	if uid >= 0 {
		for _, p := range []string{dir, sock} {
			if err := os.Chown(p, uid, gid); err != nil {
				return nil, fmt.Errorf("chown %s to the postgres user: %w", p, err)
			}
		}
	}
	cmd := exec.CommandContext(ctx, initdb, "--pgdata="+data, "--username=postgres", "--auth=trust",
		"--encoding=UTF8", "--no-locale", "--no-sync")
	cmd.SysProcAttr = attr()
	if out, err := cmd.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("%s: %w\n%s", initdb, err, out)
	}
	if port == 0 {
		if port, err = pgFreePort(); err != nil {
			return nil, err
		}
	}
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, err
	}
	if uid >= 0 {
		_ = logf.Chown(uid, gid)
	}
	s := &pgServer{
		dir:    dir,
		url:    fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", port),
		exited: make(chan struct{}),
	}
	s.cmd = exec.Command(postgres, "-D", data, "-p", strconv.Itoa(port), "-k", sock,
		"-c", "listen_addresses=127.0.0.1", "-c", "fsync=off", "-c", "max_connections=200")
	s.cmd.Stdout, s.cmd.Stderr = logf, logf
	// Its own process group: the Ctrl-C reaches example_app only, which
	// then stops the server in order.
	s.cmd.SysProcAttr = attr()
	err = s.cmd.Start()
	_ = logf.Close()
	if err != nil {
		return nil, fmt.Errorf("start %s: %w", postgres, err)
	}
	go func() {
		_ = s.cmd.Wait()
		close(s.exited)
	}()

	ready, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	for {
		select {
		case <-s.exited:
			return nil, fmt.Errorf("postgres exited at start (%s):\n%s", s.cmd.ProcessState, s.logTail())
		case <-ready.Done():
			_ = s.stop()
			return nil, fmt.Errorf("postgres not ready: %w\n%s", ready.Err(), s.logTail())
		case <-time.After(20 * time.Millisecond):
		}
		// Through its own socket directory: a TCP ping could reach another
		// server that took the port first.
		if pgPing(ready, fmt.Sprintf("host=%s port=%d user=postgres dbname=postgres", sock, port)) == nil {
			return s, nil
		}
	}
}

// stop shuts the server down (fast shutdown: SIGINT), killing its process
// group when it takes longer than pgStopTimeout, and removes its
// directory.
func (s *pgServer) stop() error {
	_ = s.cmd.Process.Signal(os.Interrupt)
	var err error
	select {
	case <-s.exited:
	case <-time.After(pgStopTimeout):
		pgKillGroup(s.cmd.Process.Pid)
		<-s.exited
		err = fmt.Errorf("postgres did not stop within %v, killed", pgStopTimeout)
	}
	return errors.Join(err, os.RemoveAll(s.dir))
}

// logTail returns the end of the server's log, for error messages.
func (s *pgServer) logTail() []byte {
	b, _ := os.ReadFile(filepath.Join(s.dir, "postgres.log"))
	if len(b) > 4000 {
		b = b[len(b)-4000:]
	}
	return bytes.TrimLeft(b, "\n")
}

// pgBinaries finds initdb and postgres: in the newest
// /usr/lib/postgresql/<version>/bin (where apt-get install postgresql puts
// them), then on PATH.
func pgBinaries() (initdb, postgres string, err error) {
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	version := func(d string) int {
		v, err := strconv.Atoi(filepath.Base(filepath.Dir(d)))
		if err != nil {
			return -1
		}
		return v
	}
	slices.SortFunc(dirs, func(a, b string) int { return version(b) - version(a) })
	for _, d := range dirs {
		i, p := filepath.Join(d, "initdb"), filepath.Join(d, "postgres")
		if isExec(i) && isExec(p) {
			return i, p, nil
		}
	}
	p, err1 := exec.LookPath("postgres")
	i, err2 := exec.LookPath("initdb")
	if err1 == nil && err2 == nil {
		return i, p, nil
	}
	return "", "", errors.New("the PostgreSQL server binaries (initdb, postgres) are not in /usr/lib/postgresql/*/bin nor on PATH: apt-get install postgresql")
}

func isExec(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && !fi.IsDir() && fi.Mode()&0o111 != 0
}

// pgFreePort returns a TCP port of 127.0.0.1 that was free a moment ago.
func pgFreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("find a free port: %w", err)
	}
	defer func() { _ = l.Close() }()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// pgPing connects once and closes the connection.
func pgPing(ctx context.Context, dsn string) error {
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	c, err := pgconn.Connect(ctx, dsn)
	if err != nil {
		return err
	}
	return c.Close(ctx)
}
