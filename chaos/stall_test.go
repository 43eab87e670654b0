//go:build chaos

package chaos

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/kvoffload/kvoffload"
	"github.com/kvoffload/kvoffload/internal/testkit"
)

// stallWriters is the load under which a paused member must not stall the cluster: 32
// concurrent writers over three members.
const stallWriters = 32

// TestStalledMemberWriters: 32 writers, each with its own client whose first member is one of
// the three in turn, offload small batches while a follower is paused with SIGSTOP for 8 s
// (its connections stay open, nothing answers). Every writer keeps committing: the clients
// whose member is paused leave it after their StallTimeout (2 s) and retry with the same txn
// ID on the next member, so no writer, and not the cluster, goes 3 s (4.5 s for one writer,
// on two shared cores) without an acknowledged batch; every acknowledged key reads back.
func TestStalledMemberWriters(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c := startCluster(t, 3, "")
	w := Workload{Seed: testkit.Seed(t), BlockSize: 16 << 10}
	leader := c.leader(ctx, c.procs[0])
	var paused *proc
	for _, p := range c.procs {
		if p != leader {
			paused = p
			break
		}
	}
	order := c.addrs() // the paused member is first for a third of the writers
	start := slices.Index(order, paused.api)
	order = append(order[start:], order[:start]...)

	var mu sync.Mutex
	acks := make([][]time.Time, stallWriters)
	var acked []string
	stop := make(chan struct{})
	errs := make(chan error, stallWriters)
	var wg sync.WaitGroup
	for i := range stallWriters {
		addrs := append(order[i%3:], order[:i%3]...)
		cl := c.dial(ctx, addrs...)
		defer cl.Close()
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := 0; ; n++ {
				select {
				case <-stop:
					errs <- nil
					return
				default:
				}
				keys := keysNamed(fmt.Sprintf("stall/w%02d/b%05d", i, n), 2)
				cctx, ccancel := context.WithTimeout(ctx, 20*time.Second)
				res, err := cl.BatchOffload(cctx, kvoffload.NewTxnID(), objectsFor(w, keys))
				ccancel()
				if err == nil && (!res[0].Outcome.OK() || !res[1].Outcome.OK()) {
					err = fmt.Errorf("%+v", res)
				}
				if err != nil {
					errs <- fmt.Errorf("writer %d (first member %s): %w", i, addrs[0], err)
					return
				}
				mu.Lock()
				acks[i] = append(acks[i], time.Now())
				acked = append(acked, keys...)
				mu.Unlock()
			}
		}()
	}

	time.Sleep(2 * time.Second)
	pausedAt := time.Now()
	_ = paused.cmd.Process.Signal(syscall.SIGSTOP)
	time.Sleep(8 * time.Second)
	resumedAt := time.Now()
	_ = paused.cmd.Process.Signal(syscall.SIGCONT)
	time.Sleep(time.Second)
	close(stop)
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}

	var all []time.Time
	worst, worstWriter := time.Duration(0), -1
	for i, ts := range acks {
		all = append(all, ts...)
		if g := longestGap(ts, pausedAt, resumedAt); g > worst {
			worst, worstWriter = g, i
		}
	}
	slices.SortFunc(all, func(a, b time.Time) int { return a.Compare(b) })
	cluster := longestGap(all, pausedAt, resumedAt)
	t.Logf("paused %s (follower) for %s: %d batches acknowledged; longest gap without an ack: cluster %s, one writer %s (writer %d)",
		paused.id, resumedAt.Sub(pausedAt), len(all), cluster, worst, worstWriter)
	if cluster > 3*time.Second {
		t.Errorf("the cluster went %s without an acknowledged batch while %s was paused", cluster, paused.id)
	}
	if worst > 4500*time.Millisecond {
		t.Errorf("writer %d went %s without an acknowledged batch while %s was paused", worstWriter, worst, paused.id)
	}

	reader := c.dial(ctx, c.addrs()...)
	defer reader.Close()
	for k := 0; k < len(acked); k += 256 {
		batch := acked[k:min(k+256, len(acked))]
		if ok, first := readAll(t, ctx, reader, w, batch); ok != len(batch) {
			t.Fatalf("acknowledged keys: %d of %d read back (%s)", ok, len(batch), first)
		}
	}
	totals.checks += len(acked)
}

// longestGap is the longest time within [from, to] without one of the sorted times ts.
func longestGap(ts []time.Time, from, to time.Time) time.Duration {
	var gap time.Duration
	prev := from
	for _, x := range ts {
		if x.Before(from) {
			continue
		}
		if x.After(to) {
			break
		}
		gap = max(gap, x.Sub(prev))
		prev = x
	}
	return max(gap, to.Sub(prev))
}
