package chaos

import (
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/kvoffload/kvoffload/fsm"
)

// linStep is one event of a hand-made history: the call of op number id (op set)
// or its return (op nil).
type linStep struct {
	id  int
	op  *Op
	res Result
}

func linCall(id int, op Op) linStep     { return linStep{id: id, op: &op} }
func linRet(id int, res Result) linStep { return linStep{id: id, res: res} }
func linTxn(b byte) fsm.TxnID           { return fsm.TxnID{b} }
func linDone(o fsm.Outcome) Result      { return Result{Status: Done, Outcome: o} }
func linSeen(sum, gen uint64) Result    { return Result{Status: Done, Present: true, Sum: sum, Gen: gen} }
func linAbsent(gen uint64) Result       { return Result{Status: Done, Gen: gen} }
func linOffload(key string, t byte, sum, gen uint64) Op {
	return Op{Kind: OpOffload, Key: key, TxnID: linTxn(t), Sum: sum, Gen: gen}
}
func linRemove(key string, t byte) Op { return Op{Kind: OpRemove, Key: key, TxnID: linTxn(t)} }
func linLookup(key string) Op         { return Op{Kind: OpLookup, Key: key} }

// record plays steps into a History (each id is its own client).
func linRecord(t *testing.T, steps ...linStep) *History {
	t.Helper()
	h := &History{Dir: t.TempDir()}
	ids := map[int]int{}
	for _, s := range steps {
		if s.op != nil {
			ids[s.id] = h.Call(s.id, *s.op)
			continue
		}
		h.Return(ids[s.id], s.res)
	}
	return h
}

func TestCheckHistory(t *testing.T) {
	cases := []struct {
		name  string
		steps []linStep
		want  porcupine.CheckResult
	}{
		{"empty", nil, porcupine.Ok},
		{"store then read", []linStep{
			linCall(0, linOffload("a", 1, 7, 1)), linRet(0, linDone(fsm.OutcomeStored)),
			linCall(1, linLookup("a")), linRet(1, linSeen(7, 1)),
		}, porcupine.Ok},
		{"read misses an acknowledged store", []linStep{
			linCall(0, linOffload("a", 1, 7, 1)), linRet(0, linDone(fsm.OutcomeStored)),
			linCall(1, linLookup("a")), linRet(1, linAbsent(0)),
		}, porcupine.Illegal},
		{"concurrent read may miss the store", []linStep{
			linCall(0, linOffload("a", 1, 7, 1)), linCall(1, linLookup("a")),
			linRet(1, linAbsent(0)), linRet(0, linDone(fsm.OutcomeStored)),
		}, porcupine.Ok},
		{"first writer wins", []linStep{
			linCall(0, linOffload("a", 1, 7, 1)), linRet(0, linDone(fsm.OutcomeStored)),
			linCall(1, linOffload("a", 2, 8, 1)), linRet(1, linDone(fsm.OutcomeConflict)),
			linCall(2, linOffload("a", 3, 7, 1)), linRet(2, linDone(fsm.OutcomeAlreadyStored)),
			linCall(3, linLookup("a")), linRet(3, linSeen(7, 1)),
		}, porcupine.Ok},
		{"two winners", []linStep{
			linCall(0, linOffload("a", 1, 7, 1)), linCall(1, linOffload("a", 2, 8, 1)),
			linRet(0, linDone(fsm.OutcomeStored)), linRet(1, linDone(fsm.OutcomeStored)),
		}, porcupine.Illegal},
		{"concurrent writers: either order", []linStep{
			linCall(0, linOffload("a", 1, 7, 1)), linCall(1, linOffload("a", 2, 8, 1)),
			linRet(0, linDone(fsm.OutcomeConflict)), linRet(1, linDone(fsm.OutcomeStored)),
			linCall(2, linLookup("a")), linRet(2, linSeen(8, 1)),
		}, porcupine.Ok},
		{"remove burns a generation", []linStep{
			linCall(0, linOffload("a", 1, 7, 1)), linRet(0, linDone(fsm.OutcomeStored)),
			linCall(1, linRemove("a", 2)), linRet(1, linDone(fsm.OutcomeRemoved)),
			linCall(2, linOffload("a", 3, 7, 2)), linRet(2, linDone(fsm.OutcomeStale)),
			linCall(3, linOffload("a", 4, 9, 3)), linRet(3, linDone(fsm.OutcomeStored)),
			linCall(4, linLookup("a")), linRet(4, linSeen(9, 3)),
		}, porcupine.Ok},
		{"removed key comes back", []linStep{
			linCall(0, linOffload("a", 1, 7, 1)), linRet(0, linDone(fsm.OutcomeStored)),
			linCall(1, linRemove("a", 2)), linRet(1, linDone(fsm.OutcomeRemoved)),
			linCall(2, linLookup("a")), linRet(2, linSeen(7, 1)),
		}, porcupine.Illegal},
		{"remove of an absent key", []linStep{
			linCall(0, linRemove("a", 1)), linRet(0, linDone(fsm.OutcomeAbsent)),
			linCall(1, linLookup("a")), linRet(1, linAbsent(1)),
		}, porcupine.Ok},
		{"stale read after a remove elsewhere", []linStep{
			linCall(0, linOffload("a", 1, 7, 1)), linRet(0, linDone(fsm.OutcomeStored)),
			linCall(1, linRemove("a", 2)), linRet(1, linDone(fsm.OutcomeRemoved)),
			linCall(2, linLookup("a")), linRet(2, linAbsent(1)),
		}, porcupine.Illegal},
		{"unknown write may take effect late", []linStep{
			linCall(0, linOffload("a", 1, 7, 1)), linRet(0, Result{Status: Unknown}),
			linCall(1, linLookup("a")), linRet(1, linAbsent(0)),
			linCall(2, linLookup("a")), linRet(2, linSeen(7, 1)),
		}, porcupine.Ok},
		{"unknown write may never take effect", []linStep{
			linCall(0, linOffload("a", 1, 7, 1)), linRet(0, Result{Status: Unknown}),
			linCall(1, linOffload("a", 2, 8, 1)), linRet(1, linDone(fsm.OutcomeStored)),
		}, porcupine.Ok},
		{"unknown write cannot take effect before its call", []linStep{
			linCall(1, linLookup("a")), linRet(1, linSeen(7, 1)),
			linCall(0, linOffload("a", 1, 7, 1)), linRet(0, Result{Status: Unknown}),
		}, porcupine.Illegal},
		{"failed write has no effect", []linStep{
			linCall(0, linOffload("a", 1, 7, 1)), linRet(0, Result{Status: Failed}),
			linCall(1, linLookup("a")), linRet(1, linSeen(7, 1)),
		}, porcupine.Illegal},
		{"pending write is unknown", []linStep{
			linCall(0, linOffload("a", 1, 7, 1)),
			linCall(1, linLookup("a")), linRet(1, linSeen(7, 1)),
		}, porcupine.Ok},
		{"keys are independent", []linStep{
			linCall(0, linOffload("a", 1, 7, 1)), linRet(0, linDone(fsm.OutcomeStored)),
			linCall(1, linOffload("b", 2, 8, 1)), linRet(1, linDone(fsm.OutcomeStored)),
			linCall(2, linLookup("b")), linRet(2, linSeen(8, 1)),
			linCall(3, linLookup("a")), linRet(3, linSeen(7, 1)),
		}, porcupine.Ok},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			h := linRecord(t, c.steps...)
			got, html := CheckHistory(h, 5*time.Second)
			if got != c.want {
				t.Fatalf("CheckHistory = %s, want %s (visualization %q)", got, c.want, html)
			}
			if (got == porcupine.Ok) != (html == "") {
				t.Fatalf("result %s with visualization %q", got, html)
			}
			if html != "" {
				b, err := os.ReadFile(html)
				if err != nil || !strings.Contains(string(b), "(a") {
					t.Fatalf("visualization %s: %v, %d bytes without the operations", html, err, len(b))
				}
			}
		})
	}
}

// TestResolve: an unknown write the log committed gets its recorded outcome,
// which can make a history illegal; one never committed is dropped.
func TestResolve(t *testing.T) {
	steps := []linStep{
		linCall(0, linOffload("a", 1, 7, 1)), linRet(0, Result{Status: Unknown}),
		linCall(1, linOffload("a", 2, 8, 1)), linRet(1, linDone(fsm.OutcomeStored)),
		linCall(2, linOffload("b", 3, 9, 1)), // pending
	}
	recorded := map[fsm.TxnID]*fsm.Result{
		linTxn(1): {TxnID: linTxn(1), Type: fsm.CmdCommit, Keys: []fsm.KeyOutcome{{Key: "a", Outcome: fsm.OutcomeStored}}},
	}
	h := linRecord(t, steps...)
	committed, dropped, err := h.Resolve(func(id fsm.TxnID) (*fsm.Result, bool) { r, ok := recorded[id]; return r, ok })
	if err != nil || committed != 1 || dropped != 1 {
		t.Fatalf("Resolve = %d committed, %d dropped, %v; want 1, 1, nil", committed, dropped, err)
	}
	// txn 1 and txn 2 both Stored, txn 1 at some time after its call: a second
	// winner of key a.
	if got, _ := CheckHistory(h, 5*time.Second); got != porcupine.Illegal {
		t.Fatalf("CheckHistory after Resolve = %s, want Illegal", got)
	}
	recorded[linTxn(1)].Keys[0].Outcome = fsm.OutcomeConflict
	h = linRecord(t, steps...)
	if _, _, err := h.Resolve(func(id fsm.TxnID) (*fsm.Result, bool) { r, ok := recorded[id]; return r, ok }); err != nil {
		t.Fatal(err)
	}
	if got, html := CheckHistory(h, 5*time.Second); got != porcupine.Ok {
		t.Fatalf("CheckHistory after Resolve = %s, want Ok (%s)", got, html)
	}

	// A resolved write took effect before Resolve: a later read must see it.
	h = linRecord(t, linCall(0, linOffload("c", 4, 7, 1)), linRet(0, Result{Status: Unknown}))
	stored := &fsm.Result{TxnID: linTxn(4), Type: fsm.CmdCommit, Keys: []fsm.KeyOutcome{{Key: "c", Outcome: fsm.OutcomeStored}}}
	if _, _, err := h.Resolve(func(fsm.TxnID) (*fsm.Result, bool) { return stored, true }); err != nil {
		t.Fatal(err)
	}
	h.Return(h.Call(1, linLookup("c")), linAbsent(0))
	if got, _ := CheckHistory(h, 5*time.Second); got != porcupine.Illegal {
		t.Fatalf("read after Resolve missed the resolved write: CheckHistory = %s, want Illegal", got)
	}
}

// TestHistoryConcurrent: clients record at once (run with -race); every
// operation gets distinct, ordered ticks.
func TestHistoryConcurrent(t *testing.T) {
	h := &History{}
	var wg sync.WaitGroup
	for c := range 4 {
		wg.Go(func() {
			for range 100 {
				id := h.Call(c, linLookup("k"))
				h.Return(id, linAbsent(0))
			}
		})
	}
	wg.Wait()
	ops := h.Ops()
	if len(ops) != 400 {
		t.Fatalf("%d operations, want 400", len(ops))
	}
	seenTick := map[int64]bool{}
	for _, o := range ops {
		if o.Call >= o.Return || seenTick[o.Call] || seenTick[o.Return] {
			t.Fatalf("bad ticks %d..%d", o.Call, o.Return)
		}
		seenTick[o.Call], seenTick[o.Return] = true, true
	}
	if got, _ := CheckHistory(h, 5*time.Second); got != porcupine.Ok {
		t.Fatalf("CheckHistory = %s, want Ok", got)
	}
}
