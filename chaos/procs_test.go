//go:build chaos

package chaos

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/kvoffload/kvoffload/client"
	"github.com/kvoffload/kvoffload/internal/freeport"
)

// storenodeBin is the storenode binary built with -tags chaos for the process tests.
var (
	buildOnce    sync.Once
	storenodeBin string
	buildErr     error
)

func binary(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "kvoffload-bin")
		if err != nil {
			buildErr = err
			return
		}
		storenodeBin = filepath.Join(dir, "storenode")
		out, err := exec.Command("go", "build", "-tags", "chaos", "-o", storenodeBin, "../cmd/storenode").CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return storenodeBin
}

// freePort returns an address on 127.0.0.1 whose port was free a moment ago and that no
// other call in this test binary returned (freeport.Addr).
func freePort(t *testing.T) string {
	t.Helper()
	addr, err := freeport.Addr()
	if err != nil {
		t.Fatal(err)
	}
	return addr
}

// proc is one storenode serve process.
type proc struct {
	id, data, raft, api, peer, http string
	failpoints                      string
	extraArgs                       []string // more serve flags (a later flag wins)
	cmd                             *exec.Cmd
	exited                          chan struct{}
}

// cluster is a set of storenode processes on 127.0.0.1.
type cluster struct {
	t     *testing.T
	procs []*proc
}

// startCluster starts n nodes: the first bootstraps, the others join through it.
func startCluster(t *testing.T, n int, failpoints string) *cluster {
	t.Helper()
	return startClusterWith(t, n, failpoints, nil)
}

// startClusterWith is startCluster with configure (if not nil) called on each proc before it
// starts, to add serve flags.
func startClusterWith(t *testing.T, n int, failpoints string, configure func(*proc)) *cluster {
	t.Helper()
	c := &cluster{t: t}
	base := t.TempDir()
	KeepOnFailure(t, base)
	for i := range n {
		p := &proc{id: fmt.Sprintf("n%d", i+1), data: filepath.Join(base, fmt.Sprintf("n%d", i+1)),
			raft: freePort(t), api: freePort(t), peer: freePort(t), http: freePort(t), failpoints: failpoints}
		c.procs = append(c.procs, p)
		if configure != nil {
			configure(p)
		}
		c.start(p)
		c.waitReady(p, 30*time.Second)
	}
	t.Cleanup(c.stopAll)
	return c
}

func (c *cluster) start(p *proc) {
	c.t.Helper()
	args := []string{"serve", "--id", p.id, "--data", p.data, "--raft-addr", p.raft, "--api-addr", p.api,
		"--peer-addr", p.peer, "--http-addr", p.http, "--log-level", "warn"}
	if p != c.procs[0] {
		args = append(args, "--join", c.procs[0].peer)
	}
	args = append(args, p.extraArgs...)
	p.cmd = exec.Command(binary(c.t), args...)
	p.cmd.Env = append(os.Environ(), "KVOFFLOAD_FAILPOINTS="+p.failpoints)
	p.cmd.Stderr = os.Stderr
	if err := p.cmd.Start(); err != nil {
		c.t.Fatal(err)
	}
	p.exited = make(chan struct{})
	go func(cmd *exec.Cmd, done chan struct{}) { _ = cmd.Wait(); close(done) }(p.cmd, p.exited)
}

// waitReady polls /readyz until the node serves.
func (c *cluster) waitReady(p *proc, limit time.Duration) {
	c.t.Helper()
	deadline := time.Now().Add(limit)
	for time.Now().Before(deadline) {
		if ok, _ := httpOK("http://" + p.http + "/readyz"); ok {
			return
		}
		select {
		case <-p.exited:
			c.t.Fatalf("%s exited before it was ready", p.id)
		case <-time.After(100 * time.Millisecond):
		}
	}
	c.t.Fatalf("%s not ready after %v", p.id, limit)
}

func (c *cluster) kill(p *proc) {
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.exited
	totals.crashes++
}

func (c *cluster) restart(p *proc) {
	c.t.Helper()
	c.start(p)
	c.waitReady(p, 60*time.Second)
	totals.recoveries++
}

func (c *cluster) stopAll() {
	for _, p := range c.procs {
		if p.cmd != nil && p.cmd.ProcessState == nil {
			_ = p.cmd.Process.Signal(syscall.SIGCONT) // a paused node cannot shut down
			_ = p.cmd.Process.Signal(syscall.SIGTERM)
		}
	}
	for _, p := range c.procs {
		if p.exited == nil {
			continue
		}
		select {
		case <-p.exited:
		case <-time.After(15 * time.Second):
			_ = p.cmd.Process.Kill()
		}
	}
}

func (c *cluster) addrs(except ...*proc) []string {
	var out []string
outer:
	for _, p := range c.procs {
		for _, e := range except {
			if p == e {
				continue outer
			}
		}
		out = append(out, p.api)
	}
	return out
}

// leader asks a live node who leads.
func (c *cluster) leader(ctx context.Context, via *proc) *proc {
	c.t.Helper()
	cl := c.dial(ctx, via.api)
	defer cl.Close()
	for ctx.Err() == nil {
		st, err := cl.Status(ctx)
		if err == nil && st.LeaderID != "" {
			for _, p := range c.procs {
				if p.id == st.LeaderID {
					return p
				}
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	c.t.Fatal("no leader")
	return nil
}

func (c *cluster) dial(ctx context.Context, addrs ...string) *client.Client {
	c.t.Helper()
	cl, err := client.Dial(ctx, addrs...)
	if err != nil {
		c.t.Fatalf("dial %v: %v", addrs, err)
	}
	return cl
}

func httpOK(url string) (bool, error) {
	hc := http.Client{Timeout: time.Second}
	resp, err := hc.Get(url)
	if err != nil {
		return false, err
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK, nil
}
