package main

import (
	"fmt"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
)

var (
	// mdLink is an inline Markdown link or image: its target, up to the
	// first space or closing parenthesis.
	mdLink = regexp.MustCompile(`\]\(([^)\s]+)[^)]*\)`)
	// mdHeading is an ATX heading line.
	mdHeading = regexp.MustCompile(`(?m)^#{1,6}[ \t]+(.+?)[ \t#]*$`)
	// fence is the start or end of a fenced code block, whose text holds
	// no links or headings.
	fence = regexp.MustCompile("(?m)^[ \t]*```")
)

// brokenLinks returns one line for each relative link in the Markdown
// files md whose file is not in the tree under root, or whose #anchor
// names no heading of its Markdown file.
func brokenLinks(root string, md []fileSize) ([]string, error) {
	anchors := map[string][]string{} // Markdown file → its heading anchors
	text := map[string]string{}
	for _, file := range md {
		f := file.path
		b, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(f)))
		if err != nil {
			return nil, err
		}
		t := outsideFences(string(b))
		text[f] = t
		for _, m := range mdHeading.FindAllStringSubmatch(t, -1) {
			anchors[f] = append(anchors[f], anchor(m[1]))
		}
	}
	var broken []string
	for _, file := range md {
		f := file.path
		for _, m := range mdLink.FindAllStringSubmatch(text[f], -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			linked, frag, _ := strings.Cut(target, "#")
			dest := f
			if linked != "" {
				dest = path.Clean(path.Join(path.Dir(f), linked))
				if _, err := os.Stat(filepath.Join(root, filepath.FromSlash(dest))); err != nil {
					broken = append(broken, fmt.Sprintf("%s: link to %s: no such file", f, target))
					continue
				}
			}
			if frag == "" || !strings.HasSuffix(dest, ".md") {
				continue
			}
			if _, ok := anchors[dest]; ok && !slices.Contains(anchors[dest], frag) {
				broken = append(broken, fmt.Sprintf("%s: link to %s: %s has no heading #%s", f, target, dest, frag))
			}
		}
	}
	return broken, nil
}

// outsideFences returns md without its fenced code blocks.
func outsideFences(md string) string {
	parts := fence.Split(md, -1)
	var b strings.Builder
	for i := 0; i < len(parts); i += 2 {
		b.WriteString(parts[i])
	}
	return b.String()
}

// anchor is the anchor GitHub gives a heading: lower case, punctuation
// dropped, spaces made hyphens.
func anchor(heading string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(heading) {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-' || r == '_' || r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r > 127:
			b.WriteRune(r)
		}
	}
	return b.String()
}
