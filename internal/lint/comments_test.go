package lint

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// history matches a comment that tells how a bug was found instead of the rule it protects:
// "(adversarial review)", "(attack review: ...)", "(new-user trial: ...)", "(issue 7)",
// "found by an adversarial test", "it used to ...". A comment states the invariant in the
// present tense and names the test that guards it; the story stays in the commit body.
// "found by" counts only next to a finder ("the leader, found by asking --addr" is no
// story), and "used to" not after a form of "be" ("a buffer is used to hold" is no story).
var history = regexp.MustCompile(`(?i)\breview(s|ed|ers?)?\b|\bnew-user\s+trials?\b|` +
	`\(issue\s+[0-9]+(,\s+item\s+[0-9]+)?\)|` +
	`\bfound\s+by\b[^.;()]{0,40}?\b(review|test|trial|nemesis|fuzz\w*|adversar\w*|attack\w*)|` +
	`(\w+)\s+used\s+to\b`)

// passive are the words before "used to" that make it "is used to", not "it used to".
var passive = []string{"is", "are", "was", "were", "be", "been", "being", "get", "gets", "got", "not"}

// TestCommentsStateRules fails on any comment outside third_party that tells a bug's history
// instead of the rule it protects, naming file:line.
func TestCommentsStateRules(t *testing.T) {
	root := moduleRoot(t)
	fset := token.NewFileSet()
	var found []finding
	files := 0
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			n := d.Name()
			if path != root && (n == "testdata" || n == "third_party" || strings.HasPrefix(n, ".") || strings.HasPrefix(n, "_")) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.ParseComments|parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, path)
		if err != nil {
			return err
		}
		files++
		if filepath.ToSlash(rel) == "internal/lint/comments_test.go" {
			return nil // this file quotes the phrases it looks for
		}
		for _, h := range historyComments(fset, f) {
			h.file = filepath.ToSlash(rel)
			found = append(found, h)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if files < 100 {
		t.Fatalf("only %d .go files found below %s: the walk of the module is broken", files, root)
	}
	told := map[string]bool{}
	for _, h := range found {
		at := fmt.Sprintf("%s:%d", h.file, h.line)
		if told[at] {
			continue // one line, two phrases
		}
		told[at] = true
		t.Errorf("%s: a comment tells history (%q): state the rule it protects and name the test that guards it; the story belongs in the commit body", at, strings.Join(strings.Fields(h.match), " "))
	}
}

// TestCommentsStateRulesCatch feeds historyComments comments that tell history, and comments
// that only look like it.
func TestCommentsStateRulesCatch(t *testing.T) {
	const src = `package p

// A stream is bounded (adversarial review).
const a = 1

// B is refused (attack review: it was not).
const b = 2

// C holds (a follow-up review: it did not). D holds
// (new-user trial: it did not).
const c = 3

/* E is the two-cluster tier (issue 12). */
const e = 4

// F frees its bytes. Found
// by an adversarial test.
const f = 5

func g() {
	_ = 1 // it used to wait forever
}

// TestMutants is the mutation check (issue 4, item 5).
const h = 6

// The leader, found by asking --addr, is asked; a buffer is used to hold the value; the
// node refused to start; a key found by the lookup is read; see issue 9's target.
const ok = 7
`
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "p.go", src, parser.ParseComments)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, h := range historyComments(fset, f) {
		got = append(got, fmt.Sprintf("%d:%s", h.line, strings.Join(strings.Fields(h.match), " ")))
	}
	want := []string{"3:review", "6:review", "9:review", "10:new-user trial", "13:(issue 12)",
		"16:Found by an adversarial", "21:it used to", "24:(issue 4, item 5)"}
	if !slices.Equal(got, want) {
		t.Errorf("history found at %q, want %q", got, want)
	}
}

// A finding is one history comment: where its match starts, and the comment's text from there.
type finding struct {
	file        string
	line        int
	match, text string
}

// historyComments returns the comments of f that match history. The lines of a comment
// group are matched as one text, so that a phrase broken across lines is found.
func historyComments(fset *token.FileSet, f *ast.File) []finding {
	var out []finding
	for _, g := range f.Comments {
		var text strings.Builder
		var lines []int // lines[i] is the line of text's byte i
		for _, c := range g.List {
			line := fset.Position(c.Slash).Line
			body := strings.TrimPrefix(strings.TrimPrefix(strings.TrimSuffix(c.Text, "*/"), "/*"), "//")
			for _, r := range []byte(body) {
				text.WriteByte(r)
				lines = append(lines, line)
				if r == '\n' {
					line++
				}
			}
			text.WriteByte('\n')
			lines = append(lines, line)
		}
		s := text.String()
		for _, m := range history.FindAllStringSubmatchIndex(s, -1) {
			if m[len(m)-2] >= 0 && slices.Contains(passive, strings.ToLower(s[m[len(m)-2]:m[len(m)-1]])) {
				continue // "is used to"
			}
			out = append(out, finding{line: lines[m[0]], match: s[m[0]:m[1]], text: s[m[0]:]})
		}
	}
	return out
}
