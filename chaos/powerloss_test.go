//go:build chaos

package chaos

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/kvoffload/kvoffload"
	"github.com/kvoffload/kvoffload/internal/failpoint"
	"github.com/kvoffload/kvoffload/internal/testkit"
	"github.com/kvoffload/kvoffload/node"
	"github.com/kvoffload/kvoffload/vfs"
	"github.com/kvoffload/kvoffload/vfs/memfs"
)

// errPowerCut stops the workload after a power-loss image has been captured.
var errPowerCut = errors.New("chaos: power cut")

// image is the state a power loss would leave: the crashed model filesystem of the bucket
// files, and copies of the WAL and Raft directories (both fsync before they acknowledge, so
// their files on disk are their durable state; an unsynced WAL tail may be torn in the copy,
// which is what the repair handles).
type image struct {
	fs  *memfs.FS
	dir string
}

func capture(t *testing.T, mem *memfs.FS, dataDir string, mode memfs.CrashMode, rng *rand.Rand) image {
	img := image{fs: mem.Crash(mode, rng), dir: filepath.Join(t.TempDir(), "data")}
	for _, sub := range []string{"wal", "raft"} {
		if err := copyDir(filepath.Join(dataDir, sub), filepath.Join(img.dir, sub)); err != nil {
			t.Errorf("capture: %v", err)
		}
	}
	return img
}

func memConfig(dir string, fs vfs.FS) node.Config {
	cfg := node.DefaultConfig(dir)
	cfg.FS = fs
	cfg.BucketSize = 4 << 20
	return cfg
}

// TestPowerLossAtEveryStep is docs/cases.md C4 "with un-fsync'd writes discarded": a sequential
// workload runs with its bucket files on the model filesystem; on the k-th hit of each
// write-path step the durable state is captured in each crash mode (unsynced bucket writes
// dropped, a prefix kept, or torn), and a fresh node recovers from that image. Every
// acknowledged key must survive and every metadata record must read back verified.
func TestPowerLossAtEveryStep(t *testing.T) {
	powerLossMatrix(t, failpoint.WritePath, powerLoss{batches: 5})
}

// powerLossMatrix runs powerLossAt for each failpoint in fps in each crash mode, with the
// batches and quota of cell.
func powerLossMatrix(t *testing.T, fps []string, cell powerLoss) {
	seed := testkit.Seed(t)
	modes := map[string]memfs.CrashMode{"drop": memfs.CrashDropAll, "prefix": memfs.CrashPrefix, "torn": memfs.CrashTorn}
	for _, fp := range fps {
		for name, mode := range modes {
			t.Run(fmt.Sprintf("%s/%s", fp, name), func(t *testing.T) {
				cell.fp, cell.mode = fp, mode
				powerLossAt(t, cell, seed)
			})
		}
	}
}

// TestPowerLossDuringEviction is the same matrix for the eviction path under a quota of
// evictQuota (8 records of 64 KiB): on the 3rd hit of each eviction step (victims chosen;
// an extent released but its hole not punched or empty bucket not removed; the REMOVE
// applied and freed) the durable state is captured and recovered. Every acknowledged key
// must read back or be absent with its removal recorded (CheckNodeEvicting), and the
// bytes on disk must be exactly those the metadata references (I4, I12): a crash between
// the REMOVE and the free leaves orphans that start-up collection reclaims.
func TestPowerLossDuringEviction(t *testing.T) {
	powerLossMatrix(t, failpoint.EvictPath, powerLoss{batches: 20, quota: evictQuota})
}

// evictQuota is the quota of TestPowerLossDuringEviction: 8 records of 64 KiB, in buckets
// of 256 KiB, so evictions empty and remove whole buckets as well as punching holes.
const evictQuota = 8 * (64<<10 + 4<<10)

// powerLoss is one cell of the power-loss matrix: the failpoint whose 3rd hit captures the
// image, the crash mode, how many batches of 4 keys the workload may offload, and a quota
// (0: none; with one, keys may be evicted and the buckets are 256 KiB).
type powerLoss struct {
	fp      string
	mode    memfs.CrashMode
	batches int
	quota   int64
}

func (p powerLoss) config(dir string, fs vfs.FS) node.Config {
	cfg := memConfig(dir, fs)
	if p.quota > 0 {
		cfg.Capacity, cfg.BucketSize = p.quota, 256<<10
	}
	return cfg
}

func powerLossAt(t *testing.T, p powerLoss, seed uint64) {
	fp, mode := p.fp, p.mode
	failpoint.Reset() // @N counts must start here, not carry hits of an earlier tier
	defer failpoint.Reset()
	rng := rand.New(rand.NewPCG(seed, uint64(len(fp))))
	mem := memfs.New()
	dataDir := filepath.Join(t.TempDir(), "data")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	n, err := node.Open(ctx, p.config(dataDir, mem))
	if err != nil {
		t.Fatal(err)
	}
	w := Workload{Seed: seed, BlockSize: 64 << 10}
	var img *image
	var ackedAtCut []string
	var acked []string
	gens, gensAtCut := map[string]uint64{}, map[string]uint64{}
	failpoint.EnableFunc(fp, 3, func() error {
		i := capture(t, mem, dataDir, mode, rng)
		img, ackedAtCut, gensAtCut = &i, append([]string(nil), acked...), maps.Clone(gens)
		return errPowerCut
	})
	for b := 0; b < p.batches && img == nil; b++ {
		objs := make([]kvoffload.Object, 4)
		for i := range objs {
			k := fmt.Sprintf("pl@b:%d@i:%d", b, i)
			objs[i] = kvoffload.Object{Key: k, Value: w.Payload(k)}
		}
		res, err := n.BatchOffload(ctx, kvoffload.NewTxnID(), objs)
		if err != nil {
			break
		}
		for _, r := range res {
			if r.Outcome.OK() && img == nil {
				acked = append(acked, r.Key)
				gens[r.Key] = ackedGen(n, r.Key)
			}
		}
	}
	_ = n.Close()
	if img == nil {
		t.Fatalf("failpoint %s was never hit 3 times", fp)
	}
	totals.crashes++
	// Put the captured WAL and Raft state back where the node lives: the bucket files in the
	// model filesystem are named by that path.
	for _, sub := range []string{"wal", "raft"} {
		if err := os.RemoveAll(filepath.Join(dataDir, sub)); err != nil {
			t.Fatal(err)
		}
		if err := copyDir(filepath.Join(img.dir, sub), filepath.Join(dataDir, sub)); err != nil {
			t.Fatal(err)
		}
	}
	rn, err := node.Open(ctx, p.config(dataDir, img.fs))
	if err != nil {
		t.Fatalf("recovery from the power-loss image failed: %v", err)
	}
	defer rn.Close()
	totals.recoveries++
	var rep Report
	if p.quota > 0 {
		rep, err = CheckNodeEvicting(ctx, rn, w, ackedAtCut, gensAtCut)
	} else {
		rep, err = CheckNode(ctx, rn, w, ackedAtCut)
	}
	if err != nil {
		t.Fatalf("after a power loss at %s: %v", fp, err)
	}
	totals.checks += rep.Checks
	if p.quota > 0 {
		t.Logf("%d keys live, %d acknowledged, %d of them evicted", rep.MetaKeys, rep.AckedKeys, rep.Evicted)
	}
}
