package raftmeta

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/kvoffload/kvoffload/fsm"
	"github.com/kvoffload/kvoffload/internal/testkit"
)

// WaitApplied waits for the FSM itself, not for raft's AppliedIndex, which raft advances
// when it queues entries for the FSM goroutine: here the FSM is held inside command "a"
// while raft has already handed "b" over, and WaitApplied for b's index must not return
// until the FSM has applied b.
func TestWaitAppliedWaitsForTheFSM(t *testing.T) {
	n, f := mustOpen(t, testConfig(t, "n1", t.TempDir()))
	mustLead(t, n)
	entered, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	f.Watch(func(*fsm.Result) { // runs on the FSM goroutine, inside ApplyCommand
		once.Do(func() { close(entered); <-release })
	})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	defer wg.Wait()
	defer close(release)
	propose := func(cmd []byte) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := n.Propose(ctx, cmd); err != nil {
				t.Errorf("propose: %v", err)
			}
		}()
	}
	propose(commitCmd(1, "a", 1))
	<-entered
	propose(commitCmd(2, "b", 1))
	testkit.Eventually(t, 5*time.Second, "raft to apply past the blocked FSM", func() bool {
		last := n.raft.LastIndex()
		return last > f.AppliedIndex() && n.raft.AppliedIndex() >= last
	})
	target := n.raft.LastIndex()
	short, cancelShort := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancelShort()
	if err := n.WaitApplied(short, target); err == nil {
		_, ok := f.Lookup("b")
		t.Fatalf("WaitApplied(%d) returned while the FSM was held (FSM applied %d, b visible: %v)", target, f.AppliedIndex(), ok)
	}
	release <- struct{}{} // let the held apply finish
	if err := n.WaitApplied(ctx, target); err != nil {
		t.Fatal(err)
	}
	if _, ok := f.Lookup("b"); !ok {
		t.Fatal("WaitApplied returned before the FSM applied b")
	}
}
