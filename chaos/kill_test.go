//go:build chaos

package chaos

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kvoffload/kvoffload/internal/failpoint"
	"github.com/kvoffload/kvoffload/internal/nodehook"
	"github.com/kvoffload/kvoffload/internal/testkit"
	"github.com/kvoffload/kvoffload/node"
)

// harness runs child processes against one data directory and checks it after each.
type harness struct {
	t    *testing.T
	dir  string
	ack  string
	seed uint64
	runs int
	// quota, if not 0, runs the children and the checks with a quota (quotaConfig), so
	// acknowledged keys may be evicted.
	quota int64
	// I9: durable progress never goes backwards across restarts.
	lastApplied uint64
}

func newHarness(t *testing.T, seed uint64) *harness {
	dir := t.TempDir()
	return &harness{t: t, dir: filepath.Join(dir, "data"), ack: filepath.Join(dir, "acked"), seed: seed}
}

// newHarnessAt is newHarness with the data directory at dataDir (for example on a mounted
// image) and the ack file, the client's view, in a fresh temporary directory.
func newHarnessAt(t *testing.T, seed uint64, dataDir string) *harness {
	return &harness{t: t, dir: dataDir, ack: filepath.Join(t.TempDir(), "acked"), seed: seed}
}

// start launches a child; failpoints is the KVOFFLOAD_FAILPOINTS value ("" = none).
func (h *harness) start(failpoints string, batches int) *exec.Cmd {
	h.t.Helper()
	h.runs++
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(),
		childEnv+"="+h.dir, childAckEnv+"="+h.ack,
		fmt.Sprintf("%s=%d", childSeedEnv, h.seed),
		fmt.Sprintf("%s=%d", childRunEnv, h.runs),
		fmt.Sprintf("%s=%d", childBatches, batches),
		fmt.Sprintf("%s=%d", childQuota, h.quota),
		"KVOFFLOAD_FAILPOINTS="+failpoints)
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		h.t.Fatal(err)
	}
	return cmd
}

// wait waits for the child and reports whether SIGKILL ended it.
func (h *harness) wait(cmd *exec.Cmd) (killed bool) {
	h.t.Helper()
	err := cmd.Wait()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() && ws.Signal() == syscall.SIGKILL {
			totals.crashes++
			return true
		}
		h.t.Fatalf("child failed: %v", err)
	}
	if err != nil {
		h.t.Fatalf("child: %v", err)
	}
	return false
}

// verify recovers the data directory in process and checks every invariant.
func (h *harness) verify() {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	n, err := node.Open(ctx, quotaConfig(h.dir, h.quota))
	if err != nil {
		h.t.Fatalf("recovery failed: %v", err)
	}
	totals.recoveries++
	h.checkMonotonic(n)
	rec := nodehook.Of(n).Recovery
	acked := h.acked()
	w := Workload{Seed: h.seed, BlockSize: childBlock}
	var rep Report
	var cerr error
	if h.quota > 0 {
		rep, cerr = CheckNodeEvicting(ctx, n, w, acked, h.ackedGens())
	} else {
		rep, cerr = CheckNode(ctx, n, w, acked)
	}
	if err := n.Close(); err != nil {
		h.t.Fatalf("close: %v", err)
	}
	if cerr != nil {
		h.t.Fatalf("invariant violated after recovery: %v", cerr)
	}
	open, err := UnresolvedIntents(filepath.Join(h.dir, "wal"))
	if err != nil || open != 0 {
		h.t.Fatalf("I5: %d unresolved intents after recovery (err %v)", open, err)
	}
	totals.checks += rep.Checks + 1
	h.t.Logf("recovered: %d unresolved intents (%d rolled forward, %d aborted), %d orphan bytes; %d keys verified, %d acked, %d evicted",
		rec.Unresolved, rec.RolledFwd, rec.Aborted, rec.OrphanBytes, rep.MetaKeys, rep.AckedKeys, rep.Evicted)
}

func (h *harness) acked() []string {
	f, err := os.Open(h.ack)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		h.t.Fatal(err)
	}
	defer f.Close()
	var keys []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if fields := strings.Fields(sc.Text()); len(fields) > 0 {
			keys = append(keys, fields[0])
		}
	}
	return keys
}

// ackedGens reads the ack file's generations: for each key the highest generation live
// when one of its offloads was acknowledged.
func (h *harness) ackedGens() map[string]uint64 {
	data, err := os.ReadFile(h.ack)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		h.t.Fatal(err)
	}
	gens := map[string]uint64{}
	for line := range strings.Lines(string(data)) {
		if fields := strings.Fields(line); len(fields) == 2 {
			g, err := strconv.ParseUint(fields[1], 10, 64)
			if err != nil {
				h.t.Fatalf("ack file line %q: %v", line, err)
			}
			gens[fields[0]] = max(gens[fields[0]], g)
		}
	}
	return gens
}

// TestKillAtEveryStep is docs/cases.md C4 (Mooncake #3089) with SIGKILL: the child dies at each
// write-path step S0..S6 (on the 3rd hit, so earlier transactions committed), then a
// recovery must leave every acknowledged key readable byte-identical, nothing uncommitted
// visible, and no unresolved intent. A second, clean run on the same directory follows.
func TestKillAtEveryStep(t *testing.T) {
	for _, fp := range failpoint.WritePath {
		t.Run(fp, func(t *testing.T) {
			h := newHarness(t, testkit.Seed(t))
			if !h.wait(h.start(fp+"=crash@3", 4)) {
				t.Fatalf("the child was not killed at %s", fp)
			}
			h.verify()
			if h.wait(h.start("", 2)) {
				t.Fatal("clean run was killed")
			}
			h.verify()
		})
	}
}

// TestKillDuringEviction is the SIGKILL tier of the eviction path: under a 24 MiB quota
// (16 MiB buckets, so evictions also remove whole bucket files) the child dies at each
// eviction step: victims chosen; an extent released in accounting but its hole not punched
// or its emptied bucket not removed; the REMOVE applied and freed. After recovery every
// acknowledged key reads back or is absent with its removal recorded, and the bucket files
// hold exactly the records the metadata references (I4, I12). A clean run follows.
func TestKillDuringEviction(t *testing.T) {
	seed := testkit.Seed(t)
	rng := rand.New(rand.NewPCG(seed, 7))
	for _, fp := range failpoint.EvictPath {
		t.Run(fp, func(t *testing.T) {
			h := newHarness(t, seed)
			h.quota = 24 << 20
			spec := fmt.Sprintf("%s=crash@%d", fp, 2+rng.IntN(3))
			if !h.wait(h.start(spec, 4)) {
				t.Fatalf("the child was not killed at %s", spec)
			}
			h.verify()
			if h.wait(h.start("", 2)) {
				t.Fatal("clean run was killed")
			}
			h.verify()
		})
	}
}

// TestKillAtRandomMoments SIGKILLs the child at a random moment, five times on one
// directory, checking after each recovery.
func TestKillAtRandomMoments(t *testing.T) {
	seed := testkit.Seed(t)
	rng := rand.New(rand.NewPCG(seed, 4))
	h := newHarness(t, seed)
	for range 5 {
		cmd := h.start("", 20)
		time.Sleep(time.Duration(300+rng.IntN(1200)) * time.Millisecond)
		_ = cmd.Process.Signal(syscall.SIGKILL)
		h.wait(cmd)
		h.verify()
	}
}

// TestKillDuringRecovery: the child dies with unresolved intents, the next child dies in the
// middle of recovering them, and a third recovery converges.
func TestKillDuringRecovery(t *testing.T) {
	h := newHarness(t, testkit.Seed(t))
	if !h.wait(h.start(failpoint.DataSynced+"=crash@4", 4)) {
		t.Fatal("first child not killed")
	}
	if !h.wait(h.start(failpoint.RecoveryResolved+"=crash@1", 1)) {
		t.Fatal("second child not killed during recovery")
	}
	h.verify()
}

// checkMonotonic is I9: the Raft applied index never goes backwards across crashes and
// recoveries of one data directory. (The WAL's last index may: a repaired torn tail drops
// unacknowledged entries, which the corruption tier does on purpose.)
func (h *harness) checkMonotonic(n *node.Node) {
	h.t.Helper()
	applied := nodehook.Of(n).Raft.AppliedIndex()
	if applied < h.lastApplied {
		h.t.Fatalf("I9: the applied index went backwards after recovery: %d, was %d", applied, h.lastApplied)
	}
	h.lastApplied = applied
	totals.checks++
}
