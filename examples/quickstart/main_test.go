package main

import (
	"context"
	"io"
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// The quick start prints what the README says it prints.
func TestQuickstart(t *testing.T) {
	r, w, err := os.Pipe()
	require.NoError(t, err)
	stdout := os.Stdout
	os.Stdout = w
	runErr := run(context.Background())
	os.Stdout = stdout
	require.NoError(t, w.Close())
	out, err := io.ReadAll(r)
	require.NoError(t, err)
	require.NoError(t, runErr)
	require.Equal(t, "ann@example.org: created\nANN@example.org: already_taken (email)\nbob@example.org: created\n", string(out))
}

// The README shows this program verbatim, so its quick start runs as written.
func TestReadmeShowsQuickstart(t *testing.T) {
	readme, err := os.ReadFile("../../README.md")
	require.NoError(t, err)
	src, err := os.ReadFile("main.go")
	require.NoError(t, err)
	body := string(src)
	start := strings.Index(body, "func run(")
	require.GreaterOrEqual(t, start, 0, "main.go has no run function")
	body = body[start:]
	require.Contains(t, string(readme), body, "README.md must show examples/quickstart/main.go's run function verbatim")
}
