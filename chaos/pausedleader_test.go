//go:build chaos

package chaos

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/kvoffload/kvoffload"
	"github.com/kvoffload/kvoffload/client"
	"github.com/kvoffload/kvoffload/internal/testkit"
)

// pausedLeaderWriters is the load of TestPausedLeaderWriters: two writers start on each member.
const pausedLeaderWriters = 6

// pausedLeaderBound is the longest any batch, through any member, may take while the leader
// is paused.
const pausedLeaderBound = 3 * time.Second

// leaderBatch is one BatchOffload of a writer: when it ran and every attempt the client made.
type leaderBatch struct {
	began, ended time.Time
	attempts     []client.Attempt
	err          error // the call's error, or the first key not Stored or AlreadyStored
}

func (b leaderBatch) took() time.Duration { return b.ended.Sub(b.began) }

// overlaps reports whether the batch was running at some moment of [from, to].
func (b leaderBatch) overlaps(from, to time.Time) bool {
	return b.began.Before(to) && b.ended.After(from)
}

// TestPausedLeaderWriters: with the leader paused by SIGSTOP (its connections stay open,
// nothing answers) no batch through any member waits more than 3 s. Six writers, each with
// its own client listing all three members and starting at one of them in turn (two on the
// leader), offload batches of 4 x 64 KiB in a loop with the client's default options; the
// leader is paused for about 6 s, then resumed. Every batch ends with every key Stored or
// AlreadyStored; every batch running at some moment of the pause took at most 3 s: a writer
// on the paused leader leaves it after its StallTimeout (2 s) for a follower, which waits out
// the election (OffloadCatchUpTimeout) instead of failing the batch; a writer on a follower
// has its forwarded COMMIT abandoned and re-sent once the follower stops following the paused
// leader. Every acknowledged key reads back after the resume. The seed fixes the payloads and
// the pause's start and length.
func TestPausedLeaderWriters(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	seed := testkit.Seed(t)
	rng := rand.New(rand.NewPCG(seed, 27))
	warmUp := 1500*time.Millisecond + time.Duration(rng.Int64N(int64(time.Second)))
	pause := 5500*time.Millisecond + time.Duration(rng.Int64N(int64(time.Second)))
	w := Workload{Seed: seed, BlockSize: 64 << 10}
	c := startCluster(t, 3, "")
	leader := c.leader(ctx, c.procs[0])

	names := map[string]string{} // API address -> "n1 (leader)"
	for _, p := range c.procs {
		names[p.api] = p.id
		if p == leader {
			names[p.api] += " (leader)"
		}
	}
	all := c.addrs()
	batches := make([][]leaderBatch, pausedLeaderWriters)
	firsts := make([]string, pausedLeaderWriters)
	stop := make(chan struct{})
	errs := make(chan error, pausedLeaderWriters)
	var wg sync.WaitGroup
	for i := range pausedLeaderWriters {
		addrs := append(append([]string(nil), all[i%3:]...), all[:i%3]...)
		firsts[i] = names[addrs[0]]
		var attempts []client.Attempt // appended on the writer's goroutine (OnAttempt runs there)
		opt := client.DefaultOptions()
		opt.OnAttempt = func(a client.Attempt) { attempts = append(attempts, a) }
		cl, err := client.DialOptions(ctx, opt, addrs...)
		if err != nil {
			t.Fatalf("dial %v: %v", addrs, err)
		}
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
				keys := keysNamed(fmt.Sprintf("paused-leader/w%d/b%05d", i, n), 4)
				attempts = nil
				b := leaderBatch{began: time.Now()}
				cctx, ccancel := context.WithTimeout(ctx, 20*time.Second)
				res, err := cl.BatchOffload(cctx, kvoffload.NewTxnID(), objectsFor(w, keys))
				ccancel()
				b.ended, b.attempts = time.Now(), attempts
				for k := 0; err == nil && k < len(res); k++ {
					if !res[k].Outcome.OK() {
						err = fmt.Errorf("%s: %s %s", res[k].Key, res[k].Outcome, res[k].Reason)
					}
				}
				b.err = err
				batches[i] = append(batches[i], b)
				if err != nil {
					errs <- fmt.Errorf("writer %d (first member %s), batch %d after %s (%s): %w",
						i, firsts[i], n, b.took(), attemptsText(b.attempts, names), err)
					return
				}
			}
		}()
	}

	time.Sleep(warmUp)
	pausedAt := time.Now()
	if err := leader.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	time.Sleep(pause)
	if err := leader.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	resumedAt := time.Now()
	time.Sleep(2 * time.Second)
	close(stop)
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Error(err)
		}
	}

	var acked []string
	total, during := 0, 0
	var worstAll leaderBatch
	worstWriter := -1
	for i, bs := range batches {
		var worst, worstOut leaderBatch
		n := 0
		for k, b := range bs {
			if b.err != nil {
				break // the writer's last batch, reported above
			}
			acked = append(acked, keysNamed(fmt.Sprintf("paused-leader/w%d/b%05d", i, k), 4)...)
			total++
			switch {
			case !b.overlaps(pausedAt, resumedAt):
				worstOut = slowest(worstOut, b)
			default:
				n++
				worst = slowest(worst, b)
				if b.took() > pausedLeaderBound {
					t.Errorf("writer %d (first member %s): a batch began %s into the pause and took %s, want at most %s: %s",
						i, firsts[i], b.began.Sub(pausedAt).Round(time.Millisecond), b.took().Round(time.Millisecond),
						pausedLeaderBound, attemptsText(b.attempts, names))
				}
			}
		}
		during += n
		if worst.took() > worstAll.took() {
			worstAll, worstWriter = worst, i
		}
		t.Logf("writer %d (first member %s): %d batches, %d during the pause; slowest during the pause %s (%s); slowest otherwise %s",
			i, firsts[i], len(bs), n, worst.took().Round(time.Millisecond), attemptsText(worst.attempts, names),
			worstOut.took().Round(time.Millisecond))
	}
	var follower *proc
	for _, p := range c.procs {
		if p != leader {
			follower = p
			break
		}
	}
	next := c.leader(ctx, follower)
	t.Logf("leader %s paused for %s (%s after the writers started), %s leads after the resume: %d batches acknowledged, %d running during the pause, the slowest of them %s (writer %d)",
		leader.id, resumedAt.Sub(pausedAt).Round(time.Millisecond), warmUp.Round(time.Millisecond), next.id,
		total, during, worstAll.took().Round(time.Millisecond), worstWriter)
	if next == leader {
		t.Errorf("%s still leads: the pause did not replace the leader", leader.id)
	}
	if t.Failed() {
		return
	}

	readFrom := time.Now()
	if err := readBackEach(ctx, c, w, acked); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d acknowledged keys read back in %s", len(acked), time.Since(readFrom).Round(time.Millisecond))
	totals.checks += len(acked)
}

// readBackEach reads every key of acked with its bytes, in batches of 256 spread over one
// reader per member (each reader's client starts at its member), and returns the first key
// that is not Found with the workload's bytes.
func readBackEach(ctx context.Context, c *cluster, w Workload, acked []string) error {
	all := c.addrs()
	errs := make(chan error, len(all))
	for r := range all {
		go func() {
			cl, err := client.Dial(ctx, append(append([]string(nil), all[r:]...), all[:r]...)...)
			if err != nil {
				errs <- err
				return
			}
			defer cl.Close()
			for k := 256 * r; k < len(acked); k += 256 * len(all) {
				keys := acked[k:min(k+256, len(acked))]
				res, err := cl.BatchGet(ctx, keys)
				if err != nil {
					errs <- fmt.Errorf("reading acknowledged keys through %s: %w", all[r], err)
					return
				}
				for _, g := range res {
					switch {
					case g.Status == kvoffload.Found && bytes.Equal(g.Value, w.Payload(g.Key)):
					case g.Status == kvoffload.Found:
						errs <- fmt.Errorf("I3: acknowledged key %s read back wrong bytes", g.Key)
						return
					default:
						errs <- fmt.Errorf("I2: acknowledged key %s read back %s %s", g.Key, g.Status, g.Reason)
						return
					}
				}
			}
			errs <- nil
		}()
	}
	var first error
	for range all {
		if err := <-errs; err != nil && first == nil {
			first = err
		}
	}
	return first
}

// slowest is whichever of a and b took longer.
func slowest(a, b leaderBatch) leaderBatch {
	if b.took() > a.took() {
		return b
	}
	return a
}

// attemptsText lists a batch's attempts: member, time taken and, for a failed one, its error.
func attemptsText(as []client.Attempt, names map[string]string) string {
	if len(as) == 0 {
		return "no attempts"
	}
	parts := make([]string, len(as))
	for i, a := range as {
		parts[i] = fmt.Sprintf("%s %s", names[a.Addr], a.Elapsed.Round(time.Millisecond))
		if a.Err != nil {
			msg := a.Err.Error()
			if len(msg) > 160 {
				msg = msg[:160] + "..."
			}
			parts[i] += ": " + msg
		}
	}
	return strings.Join(parts, " -> ")
}
