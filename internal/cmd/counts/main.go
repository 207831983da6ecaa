// Command counts prints the size of the module: the exported names of
// each public package and their total, the non-test Go lines, the largest
// library file, the longest doc comment, and the bytes of each Markdown
// file. Flags set limits; passing one prints what passed it and exits 1.
// With no flags it only prints. -links also fails on a relative link of a
// Markdown file to a file the tree does not have, or to a heading its
// Markdown file does not have.
//
//	go run ./internal/cmd/counts [-root .] [-max-exported N] [-max-file-lines N] [-max-doc-lines N] [-max-readme-bytes N] [-links]
//
// A public package is one outside internal/, example_app/, examples/ and
// test/ that is not test support (lockstoretest, claimstoretest, bustest).
// Its exported names are its top-level exported declarations, every name
// of a grouped const or var counted, and the exported methods of its
// exported types, in non-test files. A library file is a non-test Go file
// outside example_app/.
package main

import (
	"flag"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// testSupport are the public-looking packages that exist for tests.
var testSupport = []string{"lockstoretest", "claimstoretest", "bustest"}

// unpublished are the top directories whose packages are not the
// module's API.
var unpublished = []string{"example_app", "examples", "test"}

// readmes are the README files -max-readme-bytes holds to.
var readmes = []string{"README.md", "example_app/README.md"}

// limits are the flags; zero means no limit.
type limits struct {
	exported, fileLines, docLines, readmeBytes int
	links                                      bool
}

// fileSize is a file and a size (lines or bytes).
type fileSize struct {
	path string
	size int
}

// docComment is a doc comment: where it starts and how many lines it has.
type docComment struct {
	pos   string
	lines int
}

// counts is what the walk finds; paths are slash-separated, relative to
// the root.
type counts struct {
	exported     map[string]int // public package → exported names
	goLines      int            // non-test Go lines
	libraryFiles []fileSize     // non-test Go files outside example_app/, in lines
	docs         []docComment   // every doc comment
	markdown     []fileSize     // Markdown files, in bytes
}

func run(args []string, stdout, stderr io.Writer) int {
	fl := flag.NewFlagSet("counts", flag.ContinueOnError)
	fl.SetOutput(stderr)
	root := fl.String("root", ".", "the module's root directory")
	var lim limits
	fl.IntVar(&lim.exported, "max-exported", 0, "most exported names of the public packages together (0: no limit)")
	fl.IntVar(&lim.fileLines, "max-file-lines", 0, "most lines of a library file (0: no limit)")
	fl.IntVar(&lim.docLines, "max-doc-lines", 0, "most lines of a doc comment (0: no limit)")
	fl.IntVar(&lim.readmeBytes, "max-readme-bytes", 0, "most bytes of README.md and example_app/README.md (0: no limit)")
	fl.BoolVar(&lim.links, "links", false, "every relative Markdown link names a file of the tree, and its #anchor a heading")
	if err := fl.Parse(args); err != nil {
		return 2
	}
	c, err := count(*root)
	if err != nil {
		fmt.Fprintln(stderr, "counts:", err)
		return 2
	}
	c.print(stdout)
	passed := c.check(lim)
	if lim.links {
		broken, err := brokenLinks(*root, c.markdown)
		if err != nil {
			fmt.Fprintln(stderr, "counts:", err)
			return 2
		}
		passed = append(passed, broken...)
	}
	for _, p := range passed {
		fmt.Fprintln(stderr, "limit passed:", p)
	}
	if len(passed) > 0 {
		return 1
	}
	return 0
}

// count walks root, skipping hidden directories and testdata.
func count(root string) (*counts, error) {
	c := &counts{exported: make(map[string]int)}
	fset := token.NewFileSet()
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, p)
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		name := d.Name()
		if d.IsDir() {
			if rel != "." && (strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_") || name == "testdata" || name == "vendor") {
				return filepath.SkipDir
			}
			return nil
		}
		switch {
		case strings.HasSuffix(name, ".md"):
			info, err := d.Info()
			if err != nil {
				return err
			}
			c.markdown = append(c.markdown, fileSize{rel, int(info.Size())})
		case strings.HasSuffix(name, ".go"):
			return c.goFile(fset, p, rel)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return c, nil
}

// goFile counts one Go file.
func (c *counts) goFile(fset *token.FileSet, p, rel string) error {
	src, err := os.ReadFile(p)
	if err != nil {
		return err
	}
	f, err := parser.ParseFile(fset, rel, src, parser.ParseComments)
	if err != nil {
		return err
	}
	for _, g := range docComments(f) {
		start := fset.Position(g.Pos())
		end := fset.Position(g.End())
		c.docs = append(c.docs, docComment{fmt.Sprintf("%s:%d", rel, start.Line), end.Line - start.Line + 1})
	}
	if strings.HasSuffix(rel, "_test.go") {
		return nil
	}
	lines := strings.Count(string(src), "\n")
	if len(src) > 0 && src[len(src)-1] != '\n' {
		lines++
	}
	c.goLines += lines
	if !under(rel, "example_app") {
		c.libraryFiles = append(c.libraryFiles, fileSize{rel, lines})
	}
	if dir := path.Dir(rel); public(dir) {
		c.exported[dir] += exportedNames(f)
	}
	return nil
}

// under reports whether rel lies in the top directory top.
func under(rel, top string) bool { return rel == top || strings.HasPrefix(rel, top+"/") }

// public reports whether the package in dir is part of the module's API.
func public(dir string) bool {
	for _, top := range unpublished {
		if under(dir, top) {
			return false
		}
	}
	for _, elem := range strings.Split(dir, "/") {
		if elem == "internal" || slices.Contains(testSupport, elem) {
			return false
		}
	}
	return true
}

// exportedNames counts f's top-level exported names and the exported
// methods of its exported types.
func exportedNames(f *ast.File) int {
	n := 0
	for _, decl := range f.Decls {
		switch d := decl.(type) {
		case *ast.FuncDecl:
			if !d.Name.IsExported() {
				continue
			}
			if d.Recv == nil || receiverExported(d.Recv.List[0].Type) {
				n++
			}
		case *ast.GenDecl:
			for _, spec := range d.Specs {
				switch s := spec.(type) {
				case *ast.TypeSpec:
					if s.Name.IsExported() {
						n++
					}
				case *ast.ValueSpec:
					for _, id := range s.Names {
						if id.IsExported() {
							n++
						}
					}
				}
			}
		}
	}
	return n
}

// receiverExported reports whether a method's receiver type (T, *T, T[P],
// *T[P, Q]) is exported.
func receiverExported(expr ast.Expr) bool {
	for {
		switch e := expr.(type) {
		case *ast.StarExpr:
			expr = e.X
		case *ast.IndexExpr:
			expr = e.X
		case *ast.IndexListExpr:
			expr = e.X
		case *ast.ParenExpr:
			expr = e.X
		case *ast.Ident:
			return e.IsExported()
		default:
			return false
		}
	}
}

// docComments returns the doc comments of f: the package's, each
// declaration's, each spec's of a grouped declaration and each field's.
func docComments(f *ast.File) []*ast.CommentGroup {
	var docs []*ast.CommentGroup
	add := func(g *ast.CommentGroup) {
		if g != nil {
			docs = append(docs, g)
		}
	}
	ast.Inspect(f, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.File:
			add(n.Doc)
		case *ast.FuncDecl:
			add(n.Doc)
		case *ast.GenDecl:
			add(n.Doc)
		case *ast.TypeSpec:
			add(n.Doc)
		case *ast.ValueSpec:
			add(n.Doc)
		case *ast.Field:
			add(n.Doc)
		}
		return true
	})
	return docs
}

func (c *counts) totalExported() int {
	total := 0
	for _, n := range c.exported {
		total += n
	}
	return total
}

func (c *counts) largestFile() fileSize {
	var largest fileSize
	for _, f := range c.libraryFiles {
		if f.size > largest.size || (f.size == largest.size && f.path < largest.path) {
			largest = f
		}
	}
	return largest
}

func (c *counts) longestDoc() docComment {
	var longest docComment
	for _, d := range c.docs {
		if d.lines > longest.lines {
			longest = d
		}
	}
	return longest
}

func (c *counts) print(w io.Writer) {
	fmt.Fprintln(w, "exported names per public package:")
	pkgs := make([]string, 0, len(c.exported))
	for p := range c.exported {
		pkgs = append(pkgs, p)
	}
	slices.Sort(pkgs)
	for _, p := range pkgs {
		fmt.Fprintf(w, "  %-28s %6d\n", p, c.exported[p])
	}
	fmt.Fprintf(w, "  %-28s %6d\n", "total", c.totalExported())
	fmt.Fprintf(w, "non-test Go lines: %d\n", c.goLines)
	if f := c.largestFile(); f.path != "" {
		fmt.Fprintf(w, "largest library file: %s (%d lines)\n", f.path, f.size)
	}
	if d := c.longestDoc(); d.pos != "" {
		fmt.Fprintf(w, "longest doc comment: %s (%d lines)\n", d.pos, d.lines)
	}
	fmt.Fprintln(w, "Markdown bytes:")
	md := slices.Clone(c.markdown)
	slices.SortFunc(md, func(a, b fileSize) int { return strings.Compare(a.path, b.path) })
	total := 0
	for _, f := range md {
		fmt.Fprintf(w, "  %-28s %6d\n", f.path, f.size)
		total += f.size
	}
	fmt.Fprintf(w, "  %-28s %6d\n", "total", total)
}

// check returns a line for each limit passed, naming what passed it.
func (c *counts) check(lim limits) []string {
	var passed []string
	if n := c.totalExported(); lim.exported > 0 && n > lim.exported {
		passed = append(passed, fmt.Sprintf("-max-exported %d: the public packages export %d names", lim.exported, n))
	}
	if lim.fileLines > 0 {
		files := slices.Clone(c.libraryFiles)
		slices.SortFunc(files, func(a, b fileSize) int { return strings.Compare(a.path, b.path) })
		for _, f := range files {
			if f.size > lim.fileLines {
				passed = append(passed, fmt.Sprintf("-max-file-lines %d: %s has %d lines", lim.fileLines, f.path, f.size))
			}
		}
	}
	if lim.docLines > 0 {
		for _, d := range c.docs {
			if d.lines > lim.docLines {
				passed = append(passed, fmt.Sprintf("-max-doc-lines %d: the doc comment at %s has %d lines", lim.docLines, d.pos, d.lines))
			}
		}
	}
	if lim.readmeBytes > 0 {
		for _, f := range c.markdown {
			if slices.Contains(readmes, f.path) && f.size > lim.readmeBytes {
				passed = append(passed, fmt.Sprintf("-max-readme-bytes %d: %s has %d bytes", lim.readmeBytes, f.path, f.size))
			}
		}
	}
	return passed
}
