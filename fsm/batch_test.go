package fsm

import (
	"strings"
	"testing"

	"pgregory.net/rapid"
)

// TestApplyCommandsIsApplyCommandInOrder: a random log applied as random batches through
// ApplyCommands (decoded ahead of apply) gives every command the Result ApplyCommand gives
// it one at a time, the hook sees the same Results in the same order, and the states hash
// alike.
func TestApplyCommandsIsApplyCommandInOrder(t *testing.T) {
	t.Log("randomized with rapid: reproduce a failure with the -rapid.seed it prints")
	rapid.Check(t, func(t *rapid.T) {
		log := rapid.SliceOfN(rapid.Custom(genCommand), 1, 60).Draw(t, "log")
		one, batched := New(), New()
		var seenOne, seenBatched []*Result
		one.Watch(func(r *Result) { seenOne = append(seenOne, r) })
		batched.Watch(func(r *Result) { seenBatched = append(seenBatched, r) })
		var want []*Result
		for i, cmd := range log {
			want = append(want, one.ApplyCommand(uint64(i+1), cmd))
		}
		var got []*Result
		for lo := 0; lo < len(log); {
			hi := lo + rapid.IntRange(1, len(log)-lo).Draw(t, "batch")
			var index []uint64
			for i := lo; i < hi; i++ {
				index = append(index, uint64(i+1))
			}
			res := batched.ApplyCommands(index, log[lo:hi])
			if len(res) != hi-lo {
				t.Fatalf("batch [%d, %d): %d results", lo, hi, len(res))
			}
			got, lo = append(got, res...), hi
		}
		for i := range want {
			if !equalResult(got[i], want[i]) {
				t.Fatalf("index %d: ApplyCommands %+v, ApplyCommand %+v", i+1, got[i], want[i])
			}
		}
		if len(seenOne) != len(seenBatched) {
			t.Fatalf("the hook saw %d results batched, %d one at a time", len(seenBatched), len(seenOne))
		}
		for i := range seenOne {
			if !equalResult(seenBatched[i], seenOne[i]) {
				t.Fatalf("hook call %d: batched %+v, one at a time %+v", i, seenBatched[i], seenOne[i])
			}
		}
		mustCheck(t, batched)
		if batched.Hash() != one.Hash() {
			t.Fatal("the states differ")
		}
	})
}

// TestApplyCommandsPanicsAfterThePrefix: an undecodable command in a batch panics as
// ApplyCommand does, after every command before it was applied and none after it.
func TestApplyCommandsPanicsAfterThePrefix(t *testing.T) {
	f := New()
	batch := [][]byte{commit(1, ent("a", 1, 1)), {0xff, 0xff}, commit(2, ent("b", 1, 2))}
	func() {
		defer func() {
			msg, _ := recover().(string)
			if !strings.Contains(msg, "raft index 2") {
				t.Fatalf("panic %q, want one naming raft index 2", msg)
			}
		}()
		f.ApplyCommands([]uint64{1, 2, 3}, batch)
	}()
	if _, ok := f.Lookup("a"); !ok {
		t.Fatal("the command before the bad one was not applied")
	}
	if _, ok := f.Lookup("b"); ok {
		t.Fatal("the command after the bad one was applied")
	}
}
