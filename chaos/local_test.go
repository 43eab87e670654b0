//go:build chaos

package chaos

import (
	"bytes"
	"context"
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

	"github.com/kvoffload/kvoffload"
	"github.com/kvoffload/kvoffload/client"
	"github.com/kvoffload/kvoffload/internal/testkit"
	"github.com/kvoffload/kvoffload/workload/trace"
)

// The local-path client child: it offloads through the shared-memory path of the storenode
// at $KVOFFLOAD_LOCAL_CLIENT until killed, and appends each acknowledged key to the ack file.
const (
	localClientEnv  = "KVOFFLOAD_LOCAL_CLIENT"
	localAckEnv     = "KVOFFLOAD_LOCAL_ACK"
	localSeedEnv    = "KVOFFLOAD_LOCAL_SEED"
	localBlockBytes = 256 << 10
	localBatch      = 16
)

func localClientMain() int {
	seed, _ := strconv.ParseUint(os.Getenv(localSeedEnv), 10, 64)
	ack, err := os.OpenFile(os.Getenv(localAckEnv), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	ctx := context.Background()
	opt := client.DefaultOptions()
	opt.CallTimeout = 5 * time.Second
	c, err := client.DialOptions(ctx, opt, "unix://"+os.Getenv(localClientEnv))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	r, err := c.NewRegion(localBlockBytes * localBatch)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	for b := 0; ; b++ {
		descs := make([]client.Desc, localBatch)
		objs := make([]kvoffload.Object, localBatch)
		for i := range descs {
			k := fmt.Sprintf("m@pcp0@dcp0@local:%d-%d-%d", os.Getpid(), b, i)
			v := trace.Payload(seed, k, localBlockBytes)
			copy(r.Bytes()[i*localBlockBytes:], v)
			descs[i] = client.Desc{Key: k, Offset: i * localBlockBytes, Length: localBlockBytes}
			objs[i] = kvoffload.Object{Key: k, Value: v}
		}
		var res []kvoffload.KeyResult
		if b%2 == 0 { // the zero-copy path and the Store path (through staging regions) in turn
			res, err = c.OffloadFrom(ctx, kvoffload.NewTxnID(), r, descs)
		} else {
			res, err = c.BatchOffload(ctx, kvoffload.NewTxnID(), objs)
		}
		if err != nil {
			if r2, rerr := c.NewRegion(localBlockBytes * localBatch); rerr == nil { // the node restarted
				r = r2
			}
			continue
		}
		var sb strings.Builder
		for _, x := range res {
			if x.Outcome.OK() {
				sb.WriteString(x.Key + "\n")
			}
		}
		if _, err := ack.WriteString(sb.String()); err != nil {
			return 2
		}
	}
}

// TestLocalKill: SIGKILL the client process in the middle of shared-memory transfers, then
// the server, and restart it; every key a client saw acknowledged reads back whole, and the
// node unmapped the dead client's region (it accepts new registrations up to its limit).
func TestLocalKill(t *testing.T) {
	seed := testkit.Seed(t)
	rng := rand.New(rand.NewPCG(seed, 3))
	sockDir, err := os.MkdirTemp("", "kvl")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(sockDir)
	sock := filepath.Join(sockDir, "s")
	c := startClusterWith(t, 1, "", func(p *proc) {
		p.extraArgs = []string{"--local-socket", sock}
	})
	srv := c.procs[0]
	ackFile := filepath.Join(t.TempDir(), "acked")
	startClient := func() *exec.Cmd {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), localClientEnv+"="+sock, localAckEnv+"="+ackFile, fmt.Sprintf("%s=%d", localSeedEnv, seed))
		cmd.Stderr = os.Stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		return cmd
	}
	pause := func() { time.Sleep(time.Duration(400+rng.IntN(600)) * time.Millisecond) }
	for round := 0; round < 2; round++ {
		// The client dies mid-transfer.
		cl := startClient()
		pause()
		_ = cl.Process.Signal(syscall.SIGKILL)
		_ = cl.Wait()
		totals.crashes++
		// The server dies mid-transfer; the client outlives it, then is killed too.
		cl = startClient()
		pause()
		c.kill(srv)
		time.Sleep(100 * time.Millisecond)
		_ = cl.Process.Signal(syscall.SIGKILL)
		_ = cl.Wait()
		totals.crashes++
		c.restart(srv)
	}
	keys := readAcked(t, ackFile)
	if len(keys) == 0 {
		t.Fatal("no key was acknowledged")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cl, err := client.Dial(ctx, "unix://"+sock)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	for i := 0; i < len(keys); i += 256 {
		batch := keys[i:min(i+256, len(keys))]
		got, err := cl.BatchGet(ctx, batch)
		if err != nil {
			t.Fatal(err)
		}
		for _, g := range got {
			if g.Status != kvoffload.Found || !bytes.Equal(g.Value, trace.Payload(seed, g.Key, localBlockBytes)) {
				t.Fatalf("acknowledged %s: %s %s (%d bytes)", g.Key, g.Status, g.Reason, len(g.Value))
			}
		}
	}
	totals.checks += len(keys)
	// The dead clients' regions were unmapped: the node's per-node count is not used up.
	for i := 0; i < 4; i++ {
		r, err := cl.NewRegion(1 << 20)
		if err != nil {
			t.Fatalf("registration after the kills: %v", err)
		}
		defer r.Close()
	}
	perClient := map[string]int{}
	for _, k := range keys {
		perClient[strings.SplitN(strings.TrimPrefix(k, "m@pcp0@dcp0@local:"), "-", 2)[0]]++
	}
	t.Logf("%d acknowledged keys read back whole (per client process: %v)", len(keys), perClient)
}

func readAcked(t *testing.T, path string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	// Each batch is appended with one write; a line without its newline (a client killed in
	// the middle of one, should that happen) was not acknowledged, and is dropped.
	lines := strings.Split(string(b), "\n")
	return lines[:len(lines)-1]
}
