package e2e

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// buildApp builds the example_app command into a temporary directory, with
// the race detector when the tests run with it, and returns its path.
func buildApp(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "example_app")
	args := []string{"build", "-o", bin}
	if raceEnabled {
		args = append(args, "-race")
	}
	cmd := exec.Command("go", append(args, "./example_app")...)
	cmd.Dir = ".." // the module's root
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "go build: %s", out)
	return bin
}

// process is one example_app serve process.
type process struct {
	name string
	cmd  *exec.Cmd
	out  *output
	url  string
	done chan struct{} // closed once the process has exited
}

// listening matches the line serve prints once it accepts requests.
var listening = regexp.MustCompile(`listening on (http://\S+)`)

// startProcess starts `example_app serve` as node name on the database
// dsn, on a free port; wait for it with ready. The process is killed, if it
// still runs, when the test ends; its output is logged when the test
// failed.
func startProcess(t *testing.T, bin, dsn, name string, extra ...string) *process {
	t.Helper()
	args := append([]string{"serve", "-addr", "127.0.0.1:0", "-node", name, "-db", dsn}, extra...)
	p := &process{name: name, cmd: exec.Command(bin, args...)}
	p.cmd.Env = os.Environ()
	spawn(t, p)
	return p
}

// spawn starts p.cmd, whose arguments, directory and environment are set,
// with its output in p.out; the process is killed, if it still runs, when
// the test ends, and its output logged when the test failed.
func spawn(t *testing.T, p *process) {
	t.Helper()
	p.out, p.done = &output{}, make(chan struct{})
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	// A race-enabled binary waits a second at exit by default; a race it
	// found still makes it exit with code 66, which requireCleanExit sees.
	p.cmd.Env = append(p.cmd.Env, "GORACE=atexit_sleep_ms=0")
	dieWithTest(p.cmd)
	require.NoError(t, p.cmd.Start())
	go func() {
		_ = p.cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		select {
		case <-p.done:
		default:
			_ = p.cmd.Process.Kill()
			<-p.done
		}
		if t.Failed() {
			t.Logf("output of node %s:\n%s", p.name, p.out.String())
		}
	})
}

// ready waits until the process prints its address and its /healthz
// answers 200.
func (p *process) ready(t *testing.T) *process {
	t.Helper()
	eventually(t, func() bool {
		select {
		case <-p.done:
			t.Fatalf("node %s exited before listening: %v\n%s", p.name, p.cmd.ProcessState, p.out.String())
		default:
		}
		m := listening.FindStringSubmatch(p.out.String())
		if m != nil {
			p.url = m[1]
		}
		return m != nil
	}, "node %s listens", p.name)
	waitHealthy(t, newClient(t), p.url)
	return p
}

// stop sends sig and waits for the process to exit; it returns its state.
func (p *process) stop(t *testing.T, sig syscall.Signal) *os.ProcessState {
	t.Helper()
	require.NoError(t, p.cmd.Process.Signal(sig))
	select {
	case <-p.done:
	case <-time.After(deadline):
		t.Fatalf("node %s still runs %v after %v", p.name, deadline, sig)
	}
	return p.cmd.ProcessState
}

// requireCleanExit stops the process with SIGTERM and checks that it shut
// down gracefully: exit code 0, and its last words.
func (p *process) requireCleanExit(t *testing.T) {
	t.Helper()
	st := p.stop(t, syscall.SIGTERM)
	require.Equal(t, 0, st.ExitCode(), "node %s: %v\n%s", p.name, st, p.out.String())
	require.Contains(t, p.out.String(), "node "+p.name+" stopped")
}

// output collects what a process writes, safe for concurrent use.
type output struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (o *output) Write(b []byte) (int, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.buf.Write(b)
}

func (o *output) String() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.buf.String()
}
