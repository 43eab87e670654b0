package lint

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// lockDoc is where txn's locks and their order are written, once: every mutex of txn's code
// that ships is listed there, by the name readLocks gives it.
const lockDoc = "txn/doc.go"

// TestTxnLocksListed holds txn/doc.go's list of txn's mutexes ("Concurrency") to the code:
// every sync.Mutex and sync.RWMutex that txn's code that ships declares is listed, every lock
// listed exists, and the count the doc states is the count of the list.
func TestTxnLocksListed(t *testing.T) {
	dir := moduleRoot(t)
	code := readLocks(t, filepath.Join(dir, "txn"))
	if len(code) < 5 {
		t.Fatalf("%d mutexes found in txn: the parse of txn is broken", len(code))
	}
	doc, err := os.ReadFile(filepath.Join(dir, lockDoc))
	if err != nil {
		t.Fatal(err)
	}
	listed, count, err := parseLockList(string(doc))
	if err != nil {
		t.Fatalf("%s: %v", lockDoc, err)
	}
	for _, d := range diffLocks(code, listed, count) {
		t.Error(d)
	}
}

// readLocks returns the mutexes that the non-test files of dir declare, each named as the
// lock list names it, "type.field" for a struct field and "func's var" for a local variable,
// with the file that declares it.
func readLocks(t *testing.T, dir string) map[string]string {
	t.Helper()
	fset := token.NewFileSet()
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	locks := map[string]string{}
	for _, path := range files {
		if strings.HasSuffix(path, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		for _, name := range fileLocks(f) {
			locks[name] = filepath.Base(path)
		}
	}
	return locks
}

// fileLocks returns the name of every mutex f declares.
func fileLocks(f *ast.File) []string {
	var out []string
	for _, decl := range f.Decls {
		switch d := decl.(type) {
		case *ast.GenDecl:
			for _, spec := range d.Specs {
				switch sp := spec.(type) {
				case *ast.ValueSpec: // a package-level variable
					if sp.Type != nil && isMutex(sp.Type) {
						for _, id := range sp.Names {
							out = append(out, id.Name)
						}
					}
				case *ast.TypeSpec:
					st, ok := sp.Type.(*ast.StructType)
					if !ok {
						continue
					}
					for _, field := range st.Fields.List {
						if !isMutex(field.Type) {
							continue
						}
						if len(field.Names) == 0 { // embedded
							out = append(out, sp.Name.Name+"."+field.Type.(*ast.SelectorExpr).Sel.Name)
						}
						for _, n := range field.Names {
							out = append(out, sp.Name.Name+"."+n.Name)
						}
					}
				}
			}
		case *ast.FuncDecl:
			if d.Body == nil {
				continue
			}
			ast.Inspect(d.Body, func(n ast.Node) bool {
				if vs, ok := n.(*ast.ValueSpec); ok && vs.Type != nil && isMutex(vs.Type) {
					for _, id := range vs.Names {
						out = append(out, d.Name.Name+"'s "+id.Name)
					}
				}
				return true
			})
		}
	}
	return out
}

// isMutex reports whether x is sync.Mutex or sync.RWMutex.
func isMutex(x ast.Expr) bool {
	sel, ok := x.(*ast.SelectorExpr)
	if !ok {
		return false
	}
	pkg, ok := sel.X.(*ast.Ident)
	return ok && pkg.Name == "sync" && (sel.Sel.Name == "Mutex" || sel.Sel.Name == "RWMutex")
}

// lockEntry is a line of the lock list: a tab, the lock's name, two spaces or more, then
// "(" and the file that declares it.
var lockEntry = regexp.MustCompile(`^//\t(\S+(?:'s \S+)?)\s{2,}\(`)

// lockCount is the doc's statement of how many mutexes the list holds.
var lockCount = regexp.MustCompile(`these (\w+) are every mutex in the package`)

var numbers = []string{"zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven", "twelve"}

// parseLockList returns the locks the "Concurrency" section of a package doc lists before its
// "Lock order.", and the count it states (-1 if the word is not a number it knows).
func parseLockList(doc string) ([]string, int, error) {
	_, rest, ok := strings.Cut(doc, "// # Concurrency\n")
	if !ok {
		return nil, 0, fmt.Errorf(`no "# Concurrency" section`)
	}
	section, _, ok := strings.Cut(rest, "// Lock order.")
	if !ok {
		return nil, 0, fmt.Errorf(`no "Lock order." after the "# Concurrency" heading`)
	}
	m := lockCount.FindStringSubmatch(section)
	if m == nil {
		return nil, 0, fmt.Errorf("no sentence %q in the Concurrency section", "these N are every mutex in the package")
	}
	var listed []string
	for _, line := range strings.Split(section, "\n") {
		if e := lockEntry.FindStringSubmatch(line); e != nil {
			listed = append(listed, e[1])
		}
	}
	return listed, slices.Index(numbers, m[1]), nil
}

// diffLocks returns one line per difference between the mutexes of the code and those the
// doc lists, and per stated count that is not the list's.
func diffLocks(code map[string]string, listed []string, count int) []string {
	var out []string
	for _, name := range slices.Sorted(maps.Keys(code)) {
		if !slices.Contains(listed, name) {
			out = append(out, fmt.Sprintf("%s: the mutex %s (txn/%s) is not in the Concurrency section's list: add it, what it guards, and its place in the lock order",
				lockDoc, name, code[name]))
		}
	}
	for _, name := range listed {
		if _, ok := code[name]; !ok {
			out = append(out, fmt.Sprintf("%s: the Concurrency section lists %s, which txn's code does not declare: remove it or correct its name", lockDoc, name))
		}
	}
	if count != len(listed) {
		n := fmt.Sprint(len(listed))
		if len(listed) < len(numbers) {
			n = numbers[len(listed)]
		}
		out = append(out, fmt.Sprintf("%s: the Concurrency section says its list has %s mutexes, but it lists %d: say %q",
			lockDoc, numberWord(count), len(listed), "these "+n+" are every mutex in the package"))
	}
	return out
}

func numberWord(n int) string {
	if n >= 0 && n < len(numbers) {
		return numbers[n]
	}
	return "an unknown number of"
}

// TestTxnLocksListedCatch feeds diffLocks and parseLockList a list that has drifted from the
// code in each way.
func TestTxnLocksListedCatch(t *testing.T) {
	doc := strings.Join([]string{
		"// # Concurrency",
		"//",
		"// Each part has its own lock; these six are every mutex in the package:",
		"//",
		"//\ta.mu        (a.go) what a guards",
		"//\t            (a continuation, not an entry)",
		"//\tgone.mu     (b.go) a lock the code dropped",
		"//\tf's mu      (c.go) a local of one call",
		"//",
		"// Lock order. A -> B:",
		"//",
		"//\tlater.mu    (d.go) not part of the list",
	}, "\n")
	listed, count, err := parseLockList(doc)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(listed, []string{"a.mu", "gone.mu", "f's mu"}) || count != 6 {
		t.Fatalf("parsed %q, count %d", listed, count)
	}
	src := "package p\n\nimport \"sync\"\n\ntype a struct{ mu sync.Mutex }\n\ntype b struct{ x, mu sync.RWMutex }\n\n" +
		"type c struct{ sync.Mutex }\n\nvar g sync.Mutex\n\nfunc f() { var mu sync.Mutex; mu.Lock() }\n"
	file, err := parser.ParseFile(token.NewFileSet(), "p.go", src, 0)
	if err != nil {
		t.Fatal(err)
	}
	code := map[string]string{}
	for _, name := range fileLocks(file) {
		code[name] = "p.go"
	}
	if want := []string{"a.mu", "b.mu", "b.x", "c.Mutex", "f's mu", "g"}; !slices.Equal(slices.Sorted(maps.Keys(code)), want) {
		t.Fatalf("found %q, want %q", slices.Sorted(maps.Keys(code)), want)
	}
	wantOnly(t, diffLocks(code, listed, count),
		lockDoc+": the mutex b.mu (txn/p.go) is not in",
		lockDoc+": the mutex b.x (txn/p.go) is not in",
		lockDoc+": the mutex c.Mutex (txn/p.go) is not in",
		lockDoc+": the mutex g (txn/p.go) is not in",
		lockDoc+": the Concurrency section lists gone.mu, which",
		lockDoc+": the Concurrency section says its list has six mutexes, but it lists 3: say \"these three are",
	)
}
