package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// tree is a small module: one public package with every kind of exported
// name, packages that are not public, a test file, testdata and Markdown.
var tree = map[string]string{
	"go.mod": "module example.org/m\n",
	"a/a.go": `// Package a is public.
//
// Its doc comment has three lines.
package a

// Exported names: A, B, C, D (grouped), T, T.M, G, G.M, F; not e, f, T.m, t, t.M.
const (
	A, B = 1, 2
	C    = 3
	e    = 4
)

var D, f = 5, 6

type T struct {
	// X is a field: its doc comment counts as a doc comment, the field
	// not as a name.
	X int
}

func (T) M()  {}
func (*T) m() {}

type t struct{}

func (t) M() {}

type G[P any] struct{}

func (*G[P]) M() {}

func F() {}
`,
	"a/a_test.go":                        "package a\n\nfunc Exported() {}\n",
	"a/internal/x/x.go":                  "package x\n\nfunc X() {}\n",
	"a/lockstoretest/s.go":               "package lockstoretest\n\nfunc S() {}\n",
	"example_app/main.go":                "package main\n\n// Big is in example_app: not public, not a library file.\nfunc Big() {\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n}\n",
	"a/testdata/skipped.go":              "package skipped\n\nfunc Skipped() {}\n",
	"README.md":                          "# m\n",
	"example_app/README.md":              strings.Repeat("x", 20),
	"docs/NOTES.md":                      "notes\n",
	".hidden/ignored.md":                 "ignored\n",
	"examples/quick/main.go":             "package main\n\nfunc Q() {}\n",
	"test/e2e/e2e.go":                    "package e2e\n\nfunc E() {}\n",
	"b/claimstoretest/claimstoretest.go": "package claimstoretest\n\nfunc C() {}\n",
}

func writeTree(t *testing.T) string {
	t.Helper()
	root := t.TempDir()
	for name, content := range tree {
		p := filepath.Join(root, filepath.FromSlash(name))
		require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
		require.NoError(t, os.WriteFile(p, []byte(content), 0o600))
	}
	return root
}

func TestCountsPrintsWithoutFlags(t *testing.T) {
	t.Parallel()
	root := writeTree(t)
	var stdout, stderr bytes.Buffer
	require.Equal(t, 0, run([]string{"-root", root}, &stdout, &stderr), stderr.String())
	require.Empty(t, stderr.String())

	out := stdout.String()
	require.Regexp(t, `(?m)^  a +9$`, out)
	require.Regexp(t, `(?m)^  total +9$`, out, "internal, test support, examples, test and testdata count no names")
	require.NotContains(t, out, "lockstoretest")
	require.Regexp(t, `(?m)^largest library file: a/a\.go \(32 lines\)$`, out)
	require.Regexp(t, `(?m)^longest doc comment: a/a\.go:1 \(3 lines\)$`, out)
	require.Regexp(t, `(?m)^  README\.md +4$`, out)
	require.Regexp(t, `(?m)^  example_app/README\.md +20$`, out)
	require.Regexp(t, `(?m)^  total +30$`, out, "the hidden directory's Markdown is skipped")

	c, err := count(root)
	require.NoError(t, err)
	require.Equal(t, map[string]int{"a": 9}, c.exported)
	require.Equal(t, 32+3+3+53+3+3+3, c.goLines, "every non-test Go file outside testdata, example_app's 53 lines too")
}

func TestCountsNamesEachLimitPassed(t *testing.T) {
	t.Parallel()
	root := writeTree(t)
	var stdout, stderr bytes.Buffer
	code := run([]string{"-root", root, "-max-exported", "8", "-max-file-lines", "31", "-max-doc-lines", "1", "-max-readme-bytes", "10"}, &stdout, &stderr)
	require.Equal(t, 1, code)
	require.Equal(t, `limit passed: -max-exported 8: the public packages export 9 names
limit passed: -max-file-lines 31: a/a.go has 32 lines
limit passed: -max-doc-lines 1: the doc comment at a/a.go:1 has 3 lines
limit passed: -max-doc-lines 1: the doc comment at a/a.go:16 has 2 lines
limit passed: -max-readme-bytes 10: example_app/README.md has 20 bytes
`, stderr.String())
	require.Contains(t, stdout.String(), "exported names per public package:")
}

func TestCountsWithinLimitsExitsZero(t *testing.T) {
	t.Parallel()
	root := writeTree(t)
	var stdout, stderr bytes.Buffer
	code := run([]string{"-root", root, "-max-exported", "9", "-max-file-lines", "32", "-max-doc-lines", "3", "-max-readme-bytes", "20"}, &stdout, &stderr)
	require.Equal(t, 0, code, stderr.String())
	require.Empty(t, stderr.String())
}

func TestCountsRejectsABadFlag(t *testing.T) {
	t.Parallel()
	var stdout, stderr bytes.Buffer
	require.Equal(t, 2, run([]string{"-max-exported", "many"}, &stdout, &stderr))
	require.Contains(t, stderr.String(), "invalid value")
}

// -links names each relative link to a missing file or heading, and
// leaves alone web links, links inside code fences and links to files
// that are not Markdown.
func TestCountsLinks(t *testing.T) {
	t.Parallel()
	root := writeTree(t)
	doc := "# Guide\n\n## The `Lock` contract, in short\n\n" +
		"[ok](../README.md#m) [ok](#the-lock-contract-in-short) [ok](../a/a.go) [ok](https://x.org/y.md#z)\n" +
		"[gone](missing.md) [gone](../README.md#nowhere) [gone](#nor-here)\n" +
		"```\n[fenced](ignored.md)\n```\n"
	require.NoError(t, os.WriteFile(filepath.Join(root, "docs", "guide.md"), []byte(doc), 0o600))
	var stdout, stderr bytes.Buffer
	require.Equal(t, 1, run([]string{"-root", root, "-links"}, &stdout, &stderr))
	require.Equal(t, `limit passed: docs/guide.md: link to missing.md: no such file
limit passed: docs/guide.md: link to ../README.md#nowhere: README.md has no heading #nowhere
limit passed: docs/guide.md: link to #nor-here: docs/guide.md has no heading #nor-here
`, stderr.String())
}
