package lint

import (
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// archDoc is the document whose package graph TestArchitectureGraph holds to the module.
const archDoc = "docs/architecture.md"

// graphHeading opens the section of archDoc whose first indented block is the package graph.
const graphHeading = "## The package graph"

// arrow is the graph's "imports".
const arrow = "──>"

// rootPkg is how the graph names the module's root package.
const rootPkg = "kvoffload"

// node is one package of the graph: the packages of this module it imports, and the line of
// archDoc that draws it.
type node struct {
	imports []string
	line    int
}

var pkgName = regexp.MustCompile(`^[a-z0-9_][a-z0-9_.-]*(/[a-z0-9_.-]+)*$`)

// parseGraph reads the package graph of an architecture document: the first indented block
// (four spaces) after graphHeading. An entry starts at the block's indent and names one or
// more packages, comma-separated, then optionally the arrow and the packages of this module
// each of them imports; a line indented deeper continues the entry above it, and text in
// parentheses is a comment. An entry without an arrow draws leaves. Names are
// module-relative; the root package is "kvoffload".
func parseGraph(doc string) (map[string]node, error) {
	lines := strings.Split(doc, "\n")
	start := slices.Index(lines, graphHeading)
	if start < 0 {
		return nil, fmt.Errorf("no line %q", graphHeading)
	}
	type entry struct {
		text string
		line int
	}
	var entries []entry
	in := false
block:
	for i := start + 1; i < len(lines); i++ {
		l := lines[i]
		switch {
		case strings.TrimSpace(l) == "":
			continue
		case strings.HasPrefix(l, "     "):
			if len(entries) == 0 {
				return nil, fmt.Errorf("line %d: the graph starts indented deeper than four spaces", i+1)
			}
			entries[len(entries)-1].text += " " + l
			continue
		case strings.HasPrefix(l, "    "):
			in = true
			entries = append(entries, entry{l, i + 1})
			continue
		}
		if in || strings.HasPrefix(l, "#") {
			break block
		}
	}
	if len(entries) == 0 {
		return nil, fmt.Errorf("no indented block after %q", graphHeading)
	}
	g := map[string]node{}
	for _, e := range entries {
		text, err := uncomment(e.text)
		if err != nil {
			return nil, fmt.Errorf("line %d: %w", e.line, err)
		}
		from, to, drawn := strings.Cut(text, arrow)
		if strings.Contains(to, arrow) {
			return nil, fmt.Errorf("line %d: two arrows in one entry", e.line)
		}
		pkgs, err := names(from)
		if err != nil || len(pkgs) == 0 {
			return nil, fmt.Errorf("line %d: %q does not start with package names: %v", e.line, strings.TrimSpace(e.text), err)
		}
		var imps []string
		if drawn {
			if imps, err = names(to); err != nil || len(imps) == 0 {
				return nil, fmt.Errorf("line %d: the arrow points at no package names: %v", e.line, err)
			}
		}
		for _, p := range pkgs {
			if n, ok := g[p]; ok {
				return nil, fmt.Errorf("line %d: %s is drawn twice (line %d too)", e.line, p, n.line)
			}
			g[p] = node{imports: imps, line: e.line}
		}
	}
	return g, nil
}

// uncomment drops the parenthesized text of s.
func uncomment(s string) (string, error) {
	var b strings.Builder
	depth := 0
	for _, r := range s {
		switch {
		case r == '(':
			depth++
		case r == ')':
			if depth--; depth < 0 {
				return "", fmt.Errorf("a ')' without its '('")
			}
		case depth == 0:
			b.WriteRune(r)
		}
	}
	if depth != 0 {
		return "", fmt.Errorf("a '(' without its ')'")
	}
	return b.String(), nil
}

// names splits a comma-separated list of package names, sorted.
func names(s string) ([]string, error) {
	var out []string
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if !pkgName.MatchString(f) {
			return nil, fmt.Errorf("%q is not a package name", f)
		}
		if slices.Contains(out, f) {
			return nil, fmt.Errorf("%s listed twice", f)
		}
		out = append(out, f)
	}
	slices.Sort(out)
	return out, nil
}

// TestArchitectureGraph holds the package graph of docs/architecture.md to the module: every
// package is drawn, and its arrows are exactly the imports of this module's packages made by
// its files that ship (the non-_test.go files, whatever their build tags), so that neither a
// package nor an import can go missing from the document.
func TestArchitectureGraph(t *testing.T) {
	dir := moduleRoot(t)
	doc, err := os.ReadFile(filepath.Join(dir, archDoc))
	if err != nil {
		t.Fatal(err)
	}
	g, err := parseGraph(string(doc))
	if err != nil {
		t.Fatalf("%s: the package graph does not parse: %v", archDoc, err)
	}
	pkgs := readImports(t, dir)
	if len(pkgs) < 20 || len(g) < 20 {
		t.Fatalf("%d packages found, %d drawn: the walk of the module or the parse of %s is broken", len(pkgs), len(g), archDoc)
	}
	for _, d := range diffGraph(g, pkgs) {
		t.Error(d)
	}
}

// ownImports returns the packages of this module that pkg's files that ship import, in
// the graph's names, each with a file that imports it.
func ownImports(name string, imp imports) map[string]string {
	out := map[string]string{}
	for _, path := range imp.code {
		p, ok := graphName(path)
		if ok && p != name {
			out[p] = imp.in[path]
		}
	}
	return out
}

// graphName is the graph's name for an import path, if it is a package of this module.
func graphName(path string) (string, bool) {
	if path == module {
		return rootPkg, true
	}
	return strings.CutPrefix(path, module+"/")
}

// diffGraph returns one line per difference between the drawn graph g and the module's
// packages, each naming archDoc and what to change in it.
func diffGraph(g map[string]node, pkgs map[string]imports) []string {
	var out []string
	have := map[string]imports{}
	for dir, imp := range pkgs {
		name := dir
		if dir == "." {
			name = rootPkg
		}
		have[name] = imp
	}
	for _, name := range slices.Sorted(maps.Keys(have)) {
		own := ownImports(name, have[name])
		n, ok := g[name]
		if !ok {
			line := name
			if len(own) > 0 {
				line += " " + arrow + " " + strings.Join(slices.Sorted(maps.Keys(own)), ", ")
			}
			out = append(out, fmt.Sprintf("%s: package %s is not in the package graph: add the line %q to it",
				archDoc, name, "    "+line))
			continue
		}
		for _, p := range n.imports {
			if _, ok := own[p]; ok {
				continue
			}
			only := ""
			if slices.ContainsFunc(have[name].tests, func(path string) bool { q, _ := graphName(path); return q == p }) {
				only = " (only its tests do: say so in prose, not with an arrow)"
			}
			out = append(out, fmt.Sprintf("%s:%d: the package graph draws %s %s %s, but no file of %s that ships imports %s%s",
				archDoc, n.line, name, arrow, p, name, p, only))
		}
		for _, p := range slices.Sorted(maps.Keys(own)) {
			if !slices.Contains(n.imports, p) {
				out = append(out, fmt.Sprintf("%s:%d: %s imports %s (%s), but the package graph does not draw %s %s %s: add it",
					archDoc, n.line, name, p, own[p], name, arrow, p))
			}
		}
	}
	for _, name := range slices.Sorted(maps.Keys(g)) {
		if _, ok := have[name]; !ok {
			out = append(out, fmt.Sprintf("%s:%d: the package graph draws %s, which is no package of the module: remove it or correct its name",
				archDoc, g[name].line, name))
		}
	}
	return out
}

// TestArchitectureGraphCatch feeds diffGraph and parseGraph a drawing that has drifted from
// the code in each way.
func TestArchitectureGraphCatch(t *testing.T) {
	doc := strings.Join([]string{
		"# Architecture",
		"",
		graphHeading,
		"",
		"Prose before the graph.",
		"",
		"    node ──> txn, wal,          (a comment, with a comma)",
		"             fsm",
		"    txn ──> wal, kvoffload",
		"    wal, gone                   (leaves)",
		"    kvoffload",
		"",
		"Prose after the graph.",
		"",
		"    not ──> the graph",
	}, "\n")
	g, err := parseGraph(doc)
	if err != nil {
		t.Fatal(err)
	}
	if n := g["node"]; !slices.Equal(n.imports, []string{"fsm", "txn", "wal"}) || n.line != 7 {
		t.Fatalf("node parsed as %+v", n)
	}
	if _, ok := g["not"]; ok {
		t.Fatal("an indented block after the graph was read as part of it")
	}
	pkgs := map[string]imports{
		"node":  {code: []string{module + "/txn", module + "/fsm"}, tests: []string{module + "/wal"}},
		"txn":   {code: []string{module + "/wal", module, module + "/bucketstore"}, in: map[string]string{module + "/bucketstore": "txn/plan.go"}},
		"wal":   {code: []string{"os"}},
		".":     {},
		"fresh": {code: []string{module + "/wal"}},
	}
	wantOnly(t, diffGraph(g, pkgs),
		archDoc+":7: the package graph draws node ──> wal, but no file of node that ships imports wal (only its tests do",
		archDoc+":9: txn imports bucketstore (txn/plan.go), but the package graph does not draw txn ──> bucketstore",
		archDoc+": package fresh is not in the package graph: add the line \"    fresh ──> wal\"",
		archDoc+":10: the package graph draws gone, which is no package of the module",
	)
	for _, bad := range []string{
		"    a ──> b ──> c",
		"    a ──> (nothing)",
		"    a, a",
		"    a (unclosed",
		"    a ──> Node",
		"    a\n    a ──> b",
	} {
		if _, err := parseGraph(graphHeading + "\n\n" + bad + "\n"); err == nil {
			t.Errorf("%q parsed", bad)
		}
	}
}

// wantOnly fails unless got has one line per prefix of want, in any order.
func wantOnly(t *testing.T, got []string, want ...string) {
	t.Helper()
	for _, w := range want {
		if !slices.ContainsFunc(got, func(v string) bool { return strings.HasPrefix(v, w) }) {
			t.Errorf("no line %q in\n%s", w, strings.Join(got, "\n"))
		}
	}
	if len(got) != len(want) {
		t.Errorf("%d lines, want %d:\n%s", len(got), len(want), strings.Join(got, "\n"))
	}
}
