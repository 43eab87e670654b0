package lint

import (
	"go/parser"
	"go/token"
	"io/fs"
	"maps"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/kvoffload/kvoffload/internal/testkit"
)

const module = "github.com/kvoffload/kvoffload"

// A rule limits what the packages matched by from may import. Patterns are module-relative
// ("wal", "node/...") for this module's packages and full paths for others
// ("github.com/hashicorp/raft/..."); "..." matches a package and everything below it.
type rule struct {
	from   []string // the packages the rule is about
	except []string // packages of from the rule is not about
	tests  bool     // the rule also holds for _test.go files, not only the code that ships
	forbid []string // imports that are never allowed
	only   []string // if non-nil: the only packages of this module it may import
	sealed bool     // only holds for anywhere too: from may import nothing of this module
	why    string
}

// anywhere names the leaves every package may import whatever its rule's only list says
// (but a sealed rule): the assertions switch compiles to nothing without -tags invariants, so
// importing it brings the code that ships no dependency.
var anywhere = []string{"internal/invariants"}

// product names the packages that make up the store: everything outside the test and
// workload wings, including any package added later. bench/ is the workload wing's separate
// module (its own go.mod, for pebble): its files are read here like this module's.
var product = []string{"..."}

var wings = []string{"chaos/...", "cmd/...", "workload/...", "bench/...", "internal/..."}

// raftFork is the patched hashicorp/raft that consensus runs on (third_party/raft/KVOFFLOAD.md);
// upstreamRaft is the release it was copied from, which only raft-boltdb's types bring in.
const (
	raftFork     = "third_party/raft/..."
	upstreamRaft = "github.com/hashicorp/raft/..."
	// walFork is tidwall/wal with its file I/O on a seam (third_party/tidwall/wal/KVOFFLOAD.md).
	walFork = "third_party/tidwall/wal"
)

// nodeParts are the packages node is built from that sit under internal/ so that only this
// module imports them: they ship with node, so the product's rules hold for them, and they
// are not leaves.
var nodeParts = []string{"internal/forward", "internal/cluster", "internal/watch", "internal/nodehook"}

// testFS names the test filesystems: only _test.go files and chaos may import them.
var testFS = []string{"vfs/memfs", "vfs/errorfs"}

// testKit holds what every package's tests share (seeds, polling, setup failures): an only
// list never bars it, so even a leaf's tests may use it, and no code that ships imports it.
const testKit = "internal/testkit"

// rules is docs/architecture.md's list of rules that must never break, as data. Imports are
// read from every .go file whatever its build tags, so files built only with -tags chaos
// count too.
var rules = []rule{
	{from: []string{"..."}, tests: true, forbid: []string{"cmd/..."},
		why: "cmd/ holds main packages; nothing imports them"},
	{from: []string{"..."}, except: []string{"chaos/..."}, tests: true, forbid: []string{"chaos/..."},
		why: "nothing imports the crash-test harness"},
	{from: product, except: wings, forbid: []string{"workload/..."},
		why: "the product never depends on the workloads that drive it (its tests may)"},
	{from: []string{"fsm/..."}, tests: true, only: []string{"internal/mutant", "extent"},
		forbid: []string{raftFork, upstreamRaft, "github.com/hashicorp/raft-boltdb/..."},
		why:    "fsm is the pure state machine: no Raft, no WAL, no buckets"},
	{from: []string{"wal/...", "bucketstore/..."}, tests: true, only: []string{"internal/failpoint", "internal/mutant", "internal/tmpfs", "vfs/...", "extent", walFork},
		why: "wal and bucketstore are leaves: storage that knows nothing of transactions or Raft"},
	{from: []string{"vfs/..."}, tests: true, only: []string{"vfs/..."},
		why: "vfs is a leaf: the filesystem seam and its test filesystems know nothing of the store"},
	{from: []string{"..."}, except: []string{"chaos/...", "vfs/..."}, forbid: testFS,
		why: "the test filesystems (vfs/memfs, vfs/errorfs) are for tests and the chaos suite; code that ships runs on vfs.OSFS"},
	{from: []string{"..."}, except: []string{testKit}, forbid: []string{testKit},
		why: "internal/testkit is for _test.go files only"},
	{from: []string{"..."}, except: []string{"chaos/...", "txn/txntest"}, forbid: []string{"txn/txntest"},
		why: "txn/txntest is txn.Meta's test double: for tests and the chaos suite"},
	{from: []string{"txn/..."}, tests: true, forbid: []string{"raftmeta/...", "node/...", raftFork, upstreamRaft},
		why: "txn holds no Raft types: it reaches consensus through its Meta seam (txn/seams.go)"},
	{from: product, except: append([]string{"raftmeta/...", raftFork}, wings...),
		forbid: []string{raftFork, upstreamRaft, "github.com/hashicorp/raft-boltdb/..."},
		why:    "raftmeta is the one adapter between Raft and the rest of the store"},
	{from: []string{"..."}, except: []string{"raftmeta/..."}, tests: true, forbid: []string{upstreamRaft},
		why: "consensus runs on the patched fork only; upstream Raft is raft-boltdb's, met in raftmeta/logstore.go alone"},
	{from: []string{raftFork}, tests: true, only: []string{}, sealed: true,
		why: "the fork imports no other package of this module, so a new release can be copied in (third_party/raft/KVOFFLOAD.md)"},
	{from: []string{walFork}, tests: true, only: []string{}, sealed: true,
		why: "the fork imports no other package of this module, so a new release can be copied in (third_party/tidwall/wal/KVOFFLOAD.md)"},
	{from: []string{"raftmeta/..."}, only: []string{"fsm", "internal/failpoint", "third_party/raft"},
		why: "raftmeta adapts the FSM to Raft and knows nothing of transactions, the WAL or node"},
	{from: []string{"client/..."}, only: []string{"api/...", "internal/wire", "internal/transport"},
		why: "the client library depends on the wire API (and the gRPC tuning it shares with the node) only, so callers do not build the server"},
	{from: []string{"."}, only: []string{},
		why: "the root package kvoffload is the API's vocabulary: every layer may import it, it imports none"},
	{from: []string{"extent"}, tests: true, only: []string{},
		why: "extent is the one extent type of fsm, bucketstore and txn: a leaf, so both pure layers can share it"},
	{from: []string{"fake/...", "storetest/..."}, only: []string{},
		why: "the fake and the conformance suite depend on the API's vocabulary only"},
	{from: nodeParts, forbid: []string{"workload/...", raftFork, upstreamRaft, "github.com/hashicorp/raft-boltdb/..."},
		why: "node's parts under internal/ ship with node: no workload, and Raft only through raftmeta"},
	{from: []string{"api/...", "ops/...", "internal/...", "workload/trace"}, except: nodeParts, tests: true, only: []string{"api/..."},
		why: "leaves: the API, the ops endpoint, the internal helpers and the trace import no other package of this module"},
	{from: []string{"workload/diskbench"}, tests: true, only: []string{"vfs"},
		why: "the disk baseline measures the device, not the store: it reads through vfs.ReadBatch, the store's I/O engine, and nothing above it"},
}

// TestImportRules fails on any import that breaks a rule.
func TestImportRules(t *testing.T) {
	pkgs := readImports(t, moduleRoot(t))
	for _, p := range []string{"fsm", "wal", "bucketstore", "vfs", "vfs/memfs", "vfs/errorfs", "txn", "raftmeta", "node", "client", "chaos", "cmd/storenode", "third_party/raft"} {
		if _, ok := pkgs[p]; !ok {
			t.Fatalf("package %s not found: the walk of the module is broken", p)
		}
	}
	for _, v := range check(pkgs, rules) {
		t.Error(v)
	}
}

// TestImportRulesCatch feeds check imports that break each kind of rule.
func TestImportRulesCatch(t *testing.T) {
	bad := map[string]imports{
		"fsm": {code: []string{module + "/internal/mutant", module + "/third_party/raft", module + "/internal/invariants"}},
		"node": {code: []string{module + "/workload/trace", "github.com/hashicorp/raft", module + "/vfs/memfs", module + "/txn/txntest"},
			tests: []string{module + "/workload/trace", module + "/vfs/memfs", module + "/vfs/errorfs"}},
		"chaos":            {tests: []string{"github.com/hashicorp/raft"}},
		"raftmeta":         {code: []string{"github.com/hashicorp/raft", module + "/txn"}},
		"third_party/raft": {code: []string{module + "/fsm", module + "/internal/invariants"}},
		"vfs/memfs":        {code: []string{module + "/bucketstore"}},
		"wal":              {tests: []string{module + "/txn"}},
		"txn":              {tests: []string{module + "/cmd/storenode"}},
		"workload":         {code: []string{module + "/chaos"}},
		"bucketstore":      {code: []string{module + "/internal/testkit"}, tests: []string{module + "/internal/testkit"}},
	}
	got := check(bad, rules)
	for _, want := range []string{
		"fsm imports third_party/raft",
		"node imports github.com/hashicorp/raft",
		"chaos (test) imports github.com/hashicorp/raft",
		"raftmeta imports txn",
		"third_party/raft imports fsm",
		"third_party/raft imports internal/invariants",
		"wal (test) imports txn",
		"node imports workload/trace",
		"node imports vfs/memfs",
		"node imports txn/txntest",
		"vfs/memfs imports bucketstore",
		"txn (test) imports cmd/storenode",
		"workload imports chaos",
		"bucketstore imports internal/testkit",
	} {
		if !slices.ContainsFunc(got, func(v string) bool { return strings.HasPrefix(v, want+":") }) {
			t.Errorf("no violation %q in %q", want, got)
		}
	}
	if slices.ContainsFunc(got, func(v string) bool { return strings.HasPrefix(v, "node (test)") }) {
		t.Errorf("a product test importing a workload was flagged: %q", got)
	}
	if slices.ContainsFunc(got, func(v string) bool { return strings.HasPrefix(v, "bucketstore (test) imports internal/testkit:") }) {
		t.Errorf("a leaf's test importing the test kit was flagged: %q", got)
	}
	if slices.ContainsFunc(got, func(v string) bool { return strings.HasPrefix(v, "fsm imports internal/invariants:") }) {
		t.Errorf("an import of the assertions switch (anywhere) was flagged: %q", got)
	}
	if slices.ContainsFunc(got, func(v string) bool { return strings.HasPrefix(v, "raftmeta imports github.com/hashicorp/raft:") }) {
		t.Errorf("raftmeta's log-store adapter importing upstream Raft was flagged: %q", got)
	}
}

// imports holds one package's imports: from the files that ship, and from its _test.go files;
// in names, for each import of the code that ships, a file (module-relative) that makes it.
type imports struct {
	code, tests []string
	in          map[string]string
}

// check returns one line per import that breaks a rule.
func check(pkgs map[string]imports, rules []rule) []string {
	var out []string
	for _, name := range slices.Sorted(maps.Keys(pkgs)) {
		imp := pkgs[name]
		for _, r := range rules {
			if !matchAny(r.from, name) || matchAny(r.except, name) {
				continue
			}
			lists := map[string][]string{"": imp.code}
			if r.tests {
				lists[" (test)"] = imp.tests
			}
			for kind, list := range lists {
				for _, path := range list {
					if broken(r, name, path) {
						out = append(out, name+kind+" imports "+strings.TrimPrefix(path, module+"/")+": "+r.why)
					}
				}
			}
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// broken reports whether package name importing path breaks r.
func broken(r rule, name, path string) bool {
	own, ok := strings.CutPrefix(path, module+"/")
	if ok && own == name {
		return false // an external test package importing the package it tests
	}
	if ok && r.only != nil && !matchAny(r.only, own) && own != testKit && (r.sealed || !matchAny(anywhere, own)) {
		return true
	}
	if ok {
		path = own
	}
	return matchAny(r.forbid, path)
}

func matchAny(patterns []string, pkg string) bool {
	for _, p := range patterns {
		if p == "..." || p == pkg {
			return true
		}
		if base, ok := strings.CutSuffix(p, "/..."); ok && (pkg == base || strings.HasPrefix(pkg, base+"/")) {
			return true
		}
	}
	return false
}

// readImports parses the import block of every .go file below root (testdata and hidden
// directories aside), keyed by module-relative package directory.
func readImports(t *testing.T, root string) map[string]imports {
	t.Helper()
	pkgs := map[string]imports{}
	fset := token.NewFileSet()
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			n := d.Name()
			if path != root && (n == "testdata" || strings.HasPrefix(n, ".") || strings.HasPrefix(n, "_")) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.ImportsOnly)
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, filepath.Dir(path))
		if err != nil {
			return err
		}
		name := filepath.ToSlash(rel)
		imp := pkgs[name]
		for _, s := range f.Imports {
			p, err := strconv.Unquote(s.Path.Value)
			if err != nil {
				return err
			}
			if strings.HasSuffix(path, "_test.go") {
				imp.tests = append(imp.tests, p)
				continue
			}
			imp.code = append(imp.code, p)
			if imp.in == nil {
				imp.in = map[string]string{}
			}
			if _, ok := imp.in[p]; !ok {
				file, _ := filepath.Rel(root, path)
				imp.in[p] = filepath.ToSlash(file)
			}
		}
		pkgs[name] = imp
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return pkgs
}

// moduleRoot is the directory of go.mod above the test's working directory.
var moduleRoot = testkit.ModuleRoot
