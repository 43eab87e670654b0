package node

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/kvoffload/kvoffload"
	"github.com/kvoffload/kvoffload/client"
	"github.com/kvoffload/kvoffload/internal/failpoint"
)

// refusalBound is how long any call may take against a fail-stopped member: the node knows
// its state, so the answer is immediate; the bound leaves room for a loaded CI machine. The
// calls run under a 30 s context, so a client that waited out its deadline fails the bound.
const refusalBound = time.Second

// walFaults are the WAL write errors that fail-stop a node.
var walFaults = []syscall.Errno{syscall.EIO, syscall.ENOSPC}

// failStop makes the next WAL write of any node in this process fail with errno once, and
// offloads one key through n so that n is the node that hits it; n must then report itself
// fail-stopped.
func failStop(t *testing.T, n *Node, errno syscall.Errno) {
	t.Helper()
	var hits atomic.Int64
	failpoint.EnableFunc(failpoint.WALWriteBatch, 0, func() error {
		if hits.Add(1) == 1 {
			return errno
		}
		return nil
	})
	defer failpoint.Disable(failpoint.WALWriteBatch)
	res, _ := n.BatchOffload(context.Background(), kvoffload.NewTxnID(), objects(1, 4096, keyOf("failstop", 999)))
	if len(res) != 1 || res[0].Outcome.OK() || !strings.HasPrefix(res[0].Reason, "wal: ") || strings.Contains(res[0].Reason, "wal: wal:") {
		t.Fatalf("offload with a failing WAL write: %+v; want Failed, its reason the WAL's error once", res)
	}
	if err := n.Healthy(); err == nil || !strings.Contains(err.Error(), errno.Error()) {
		t.Fatalf("Healthy after a WAL write failed with %v: %v, want the fail-stop", errno, err)
	}
}

// call is one call kind of the client API.
type call struct {
	name string
	run  func(ctx context.Context, c *client.Client) error
}

// apiCalls are the client API's calls that need a serving node, on keys.
func apiCalls(keys []string) []call {
	return []call{
		{"BatchOffload", func(ctx context.Context, c *client.Client) error {
			_, err := c.BatchOffload(ctx, kvoffload.NewTxnID(), objects(2, 4096, keys...))
			return err
		}},
		{"Txn", func(ctx context.Context, c *client.Client) error {
			tx := c.Begin()
			for _, o := range objects(3, 4096, keys...) {
				tx.Put(o.Key, o.Value)
			}
			_, err := tx.Commit(ctx)
			return err
		}},
		{"BatchGet", func(ctx context.Context, c *client.Client) error {
			_, err := c.BatchGet(ctx, keys)
			return err
		}},
		{"BatchExists", func(ctx context.Context, c *client.Client) error {
			_, err := c.BatchExists(ctx, keys, 0)
			return err
		}},
		{"Remove", func(ctx context.Context, c *client.Client) error {
			_, err := c.Remove(ctx, keys)
			return err
		}},
		{"Stats", func(ctx context.Context, c *client.Client) error {
			_, err := c.Stats(ctx)
			return err
		}},
	}
}

// zeroCopyCalls are the local path's own calls, through a region of c.
func zeroCopyCalls(t *testing.T, c *client.Client, key string) []call {
	r, err := c.NewRegion(1 << 20)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Close() })
	d := []client.Desc{{Key: key, Offset: 0, Length: 4096}}
	return []call{
		{"OffloadFrom", func(ctx context.Context, c *client.Client) error {
			_, err := c.OffloadFrom(ctx, kvoffload.NewTxnID(), r, d)
			return err
		}},
		{"GetInto", func(ctx context.Context, c *client.Client) error {
			_, err := c.GetInto(ctx, r, d)
			return err
		}},
	}
}

// timed runs cl under a 30 s deadline and returns its error and duration.
func timed(c *client.Client, cl call) (error, time.Duration) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	began := time.Now()
	err := cl.run(ctx, c)
	return err, time.Since(began)
}

// TestFailStopRefusesAtOnce: a fail-stopped node answers every call of the client API, over
// TCP and over the local socket, within refusalBound with ErrUnavailable naming the fail-stop
// (a refusal on the wire that the client never retries against the same member), and Status
// still answers with the reason.
func TestFailStopRefusesAtOnce(t *testing.T) {
	for _, errno := range walFaults {
		t.Run(errno.Error(), func(t *testing.T) {
			cfg := testConfig(t.TempDir())
			cfg.APIAddr = "127.0.0.1:0"
			cfg.Local = Local{Socket: localSocketPath(t)}
			n := mustOpen(t, cfg)
			defer n.Close()
			key := keyOf("failstop", 1)
			mustOffload(t, n, objects(1, 4096, key))
			failStop(t, n, errno)
			for _, addr := range []string{n.APIAddr(), "unix://" + n.LocalSocket()} {
				c, err := client.DialOptions(context.Background(), client.DefaultOptions(), addr)
				if err != nil {
					t.Fatal(err)
				}
				defer c.Close()
				calls := apiCalls([]string{key, keyOf("failstop", 2)})
				if strings.HasPrefix(addr, "unix://") {
					calls = append(calls, zeroCopyCalls(t, c, key)...)
				}
				for _, cl := range calls {
					err, took := timed(c, cl)
					if !errors.Is(err, kvoffload.ErrUnavailable) || !strings.Contains(err.Error(), "fail-stopped") || took > refusalBound {
						t.Errorf("%s %s on a fail-stopped node: %v after %s; want ErrUnavailable naming the fail-stop within %s", addr, cl.name, err, took, refusalBound)
					}
				}
				if st, err := c.Status(context.Background()); err != nil || !strings.Contains(st.Refusing, "coordinator failed") {
					t.Errorf("%s Status of a fail-stopped node: %+v %v, want Refusing naming the failure", addr, st, err)
				}
			}
		})
	}
}

// TestFailStopClusterMovesOn: in a 3-node cluster whose member n2 fail-stopped, a client
// that lists n2 first moves to another member at once: every call kind succeeds within
// refusalBound, keys n1 owns read Found, and keys n2 owns read Unavailable per key (their
// bytes are on n2 alone) within the same bound, naming the fail-stop.
func TestFailStopClusterMovesOn(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a 3-node cluster")
	}
	nodes, _ := openNamed(t, "n1", "n2", "n3")
	n1, n2 := nodes[0], nodes[1]
	leaderOf(t, nodes...)
	k1, k2 := keyOf("owned-n1", 0), keyOf("owned-n2", 0)
	mustOffload(t, n1, objects(1, 4096, k1))
	mustOffload(t, n2, objects(1, 4096, k2))
	failStop(t, n2, syscall.EIO)

	c, err := client.DialOptions(context.Background(), client.DefaultOptions(), n2.APIAddr(), n1.APIAddr(), nodes[2].APIAddr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for _, cl := range apiCalls([]string{keyOf("fresh", 0), keyOf("fresh", 1)}) {
		if err, took := timed(c, cl); err != nil || took > refusalBound {
			t.Errorf("%s with member n2 fail-stopped: %v after %s; want success through another member within %s", cl.name, err, took, refusalBound)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	began := time.Now()
	res, err := c.BatchGet(ctx, []string{k1, k2})
	took := time.Since(began)
	if err != nil || len(res) != 2 || took > refusalBound {
		t.Fatalf("BatchGet of keys of n1 and n2: %v %v after %s", res, err, took)
	}
	if res[0].Status != kvoffload.Found || res[1].Status != kvoffload.Unavailable || !strings.Contains(res[1].Reason, "coordinator failed") {
		t.Errorf("BatchGet: %s %s (%s); want n1's key Found, n2's Unavailable naming the fail-stop", res[0].Status, res[1].Status, res[1].Reason)
	}
}
