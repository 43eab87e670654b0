package chaos

import (
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/kvoffload/kvoffload/fsm"
)

// Linearizability of the replicated metadata (invariant I8 of docs/chaos.md).
//
// The model is one register per key, with the FSM's rules (fsm/fsm.go
// applyCommit, applyRemove) for single-key commands:
//
//	state:   present, sum, gen        gen = the key's last generation (live or removed)
//	Offload(key, gen g, sum s):
//	  present, sum == s   -> AlreadyStored          (state unchanged)
//	  present, sum != s   -> Conflict               (state unchanged)
//	  absent, g <= gen    -> Stale                  (state unchanged)
//	  absent, g >  gen    -> Stored                 present, sum = s, gen = g
//	Remove(key):
//	  present             -> Removed                absent, gen+1
//	  absent              -> Absent                 gen+1 (a burnt generation)
//	Lookup(key)           -> (present, sum, gen)    state unchanged
//
// First writer wins while the key is live; a remove ends the version and burns a
// generation, so an older write can never resurrect the key. Every Offload of a
// workload must use the same payload size, because the FSM's AlreadyStored compares
// Sum and Size and the model compares Sum only. Commands touch one key each, so the
// history is checked per key (porcupine Partition).
//
// Indeterminate outcomes are handled the etcd way: a write whose client gave up
// (leadership lost, timeout, shutdown) keeps its call time and gets return time +∞,
// so the checker may place its effect anywhere after its call, or never. A harness
// that can see the converged replicas afterwards should tighten such writes with
// History.Resolve: a transaction recorded by the FSM gets its recorded outcome and
// return time "now", one the log never committed is dropped. A definite failure (the command was never appended)
// and a failed read have no effect and are left out of the check.

// OpKind is what a recorded operation did.
type OpKind uint8

// The operations of the metadata model.
const (
	OpOffload OpKind = iota + 1 // propose a one-key COMMIT
	OpRemove                    // propose a one-key REMOVE (Gen 0: whatever version is live)
	OpLookup                    // read the key on the leader after a Barrier
)

func (k OpKind) String() string {
	switch k {
	case OpOffload:
		return "offload"
	case OpRemove:
		return "remove"
	case OpLookup:
		return "lookup"
	}
	return fmt.Sprintf("OpKind(%d)", uint8(k))
}

// Op is one client request: the porcupine input.
type Op struct {
	Kind  OpKind
	Key   string
	TxnID fsm.TxnID // Offload and Remove; retries of the request reuse it
	Sum   uint64    // Offload: the payload checksum
	Gen   uint64    // Offload: the generation the client proposed
}

// Status tells how a request ended.
type Status uint8

// The request endings.
const (
	Done    Status = iota + 1 // the client saw the result
	Failed                    // definitely no effect (never appended); dropped from the check
	Unknown                   // indeterminate: return time +∞, any or no effect
)

// Result is what the client saw: the porcupine output.
type Result struct {
	Status  Status
	Outcome fsm.Outcome // Offload: Stored, AlreadyStored, Conflict, Stale; Remove: Removed, Absent
	Present bool        // Lookup
	Sum     uint64      // Lookup
	Gen     uint64      // Lookup
}

// ResultOf returns the Done result of a one-key command from the FSM's Result.
func ResultOf(r *fsm.Result) (Result, error) {
	if r == nil || len(r.Keys) != 1 {
		return Result{}, fmt.Errorf("chaos: want a one-key fsm.Result, got %+v", r)
	}
	return Result{Status: Done, Outcome: r.Keys[0].Outcome}, nil
}

// registerState is the model state of one key. It is comparable, so porcupine's
// default == equality works.
type registerState struct {
	present bool
	sum     uint64
	gen     uint64
}

// stepRegister applies op to s and reports whether out is a possible result.
func stepRegister(s registerState, op Op, out Result) (bool, registerState) {
	switch op.Kind {
	case OpLookup:
		return out.Status == Unknown || (out.Present == s.present && (!s.present || out.Sum == s.sum) && out.Gen == s.gen), s
	case OpRemove:
		want, next := fsm.OutcomeAbsent, registerState{gen: s.gen + 1}
		if s.present {
			want = fsm.OutcomeRemoved
		}
		return out.Status == Unknown || out.Outcome == want, next
	case OpOffload:
		want, next := fsm.OutcomeStale, s
		switch {
		case s.present && s.sum == op.Sum:
			want = fsm.OutcomeAlreadyStored
		case s.present:
			want = fsm.OutcomeConflict
		case op.Gen > s.gen:
			want, next = fsm.OutcomeStored, registerState{present: true, sum: op.Sum, gen: op.Gen}
		}
		return out.Status == Unknown || out.Outcome == want, next
	}
	return false, s
}

// MetadataModel is the porcupine model of the metadata, partitioned by key.
var MetadataModel = porcupine.Model{
	Partition: func(ops []porcupine.Operation) [][]porcupine.Operation {
		byKey := map[string]int{}
		var parts [][]porcupine.Operation
		for _, o := range ops {
			k := o.Input.(Op).Key
			i, ok := byKey[k]
			if !ok {
				i = len(parts)
				byKey[k] = i
				parts = append(parts, nil)
			}
			parts[i] = append(parts[i], o)
		}
		return parts
	},
	Init: func() any { return registerState{} },
	Step: func(state, input, output any) (bool, any) {
		return stepRegister(state.(registerState), input.(Op), output.(Result))
	},
	Hash: func(state any) uint64 {
		s := state.(registerState)
		h := s.sum*0x9e3779b97f4a7c15 ^ s.gen
		if s.present {
			h = ^h
		}
		return h
	},
	DescribeOperation: func(input, output any) string {
		op, out := input.(Op), output.(Result)
		var res string
		switch {
		case out.Status == Unknown:
			res = "unknown"
		case op.Kind == OpLookup && out.Present:
			res = fmt.Sprintf("sum %x gen %d", out.Sum, out.Gen)
		case op.Kind == OpLookup:
			res = fmt.Sprintf("absent gen %d", out.Gen)
		default:
			res = out.Outcome.String()
		}
		switch op.Kind {
		case OpOffload:
			return fmt.Sprintf("offload(%s, sum %x, gen %d) txn %.8s -> %s", op.Key, op.Sum, op.Gen, op.TxnID, res)
		case OpRemove:
			return fmt.Sprintf("remove(%s) txn %.8s -> %s", op.Key, op.TxnID, res)
		}
		return fmt.Sprintf("lookup(%s) -> %s", op.Key, res)
	},
	DescribeState: func(state any) string {
		s := state.(registerState)
		if !s.present {
			return fmt.Sprintf("absent gen %d", s.gen)
		}
		return fmt.Sprintf("sum %x gen %d", s.sum, s.gen)
	},
}

// pending marks an operation whose client has not returned yet.
const pending = -1

// History records the operations of concurrent clients. Call and return times
// are ticks of one logical clock taken under the lock, so they order the
// requests exactly as the recorder saw them. Safe for concurrent use.
type History struct {
	// Dir is where CheckHistory writes the visualization of a failed check
	// ("" = os.TempDir()).
	Dir string

	mu    sync.Mutex
	clock int64
	ops   []porcupine.Operation
}

// Call records the start of op by client (0-based) and returns its id for Return.
// Call it before the request is sent.
func (h *History) Call(client int, op Op) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.clock++
	h.ops = append(h.ops, porcupine.Operation{ClientId: client, Input: op, Call: h.clock, Return: pending})
	return len(h.ops) - 1
}

// Return records how operation id ended. Call it after the result was seen. An
// Unknown result keeps return time +∞.
func (h *History) Return(id int, res Result) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.clock++
	o := &h.ops[id]
	o.Output, o.Return = res, h.clock
	if res.Status == Unknown {
		o.Return = math.MaxInt64
	}
}

// Ops returns a copy of the recorded operations. An operation still pending has
// Return -1 and no Output.
func (h *History) Ops() []porcupine.Operation {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]porcupine.Operation(nil), h.ops...)
}

// Resolve tightens indeterminate writes (Unknown, or still pending): lookup
// returns the FSM's recorded Result of a transaction, or false if it has none. A
// recorded write took effect before now, so it gets its recorded outcome and
// return time now. A write lookup does not know becomes Failed (no effect): call
// Resolve only when that is final, that is when no proposal is in flight any more
// and lookup reads a replica that applied everything the log will ever commit of
// them (after heal, a final write and a Barrier on the leader). It returns how many
// writes were committed and how many dropped.
func (h *History) Resolve(lookup func(fsm.TxnID) (*fsm.Result, bool)) (committed, dropped int, err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.clock++
	for i := range h.ops {
		o := &h.ops[i]
		op := o.Input.(Op)
		if op.Kind == OpLookup || (o.Return != pending && o.Output.(Result).Status != Unknown) {
			continue
		}
		r, ok := lookup(op.TxnID)
		if !ok {
			o.Output, o.Return = Result{Status: Failed}, h.clock
			dropped++
			continue
		}
		res, err := ResultOf(r)
		if err != nil {
			return committed, dropped, err
		}
		o.Output, o.Return = res, h.clock
		committed++
	}
	return committed, dropped, nil
}

// checkable returns the operations the checker sees: failed requests and failed
// reads are left out (they had no effect), pending writes become Unknown.
func (h *History) checkable() []porcupine.Operation {
	h.mu.Lock()
	defer h.mu.Unlock()
	ops := make([]porcupine.Operation, 0, len(h.ops))
	for _, o := range h.ops {
		op := o.Input.(Op)
		if o.Return == pending {
			if op.Kind == OpLookup {
				continue
			}
			o.Output, o.Return = Result{Status: Unknown}, math.MaxInt64
		}
		res := o.Output.(Result)
		if res.Status == Failed || (op.Kind == OpLookup && res.Status != Done) {
			continue
		}
		ops = append(ops, o)
	}
	return ops
}

// CheckHistory checks h against MetadataModel within timeout. On Illegal or
// Unknown it writes porcupine's HTML visualization into h.Dir and returns its path.
func CheckHistory(h *History, timeout time.Duration) (porcupine.CheckResult, string) {
	ops := h.checkable()
	res := porcupine.CheckOperationsTimeout(MetadataModel, ops, timeout)
	if res == porcupine.Ok {
		return res, ""
	}
	_, info := porcupine.CheckOperationsVerbose(MetadataModel, ops, timeout)
	dir := h.Dir
	if dir == "" {
		dir = os.TempDir()
	}
	f, err := os.CreateTemp(dir, "linearizability-*.html")
	if err != nil {
		return res, ""
	}
	err = porcupine.Visualize(MetadataModel, info, f)
	if err = errors.Join(err, f.Close()); err != nil {
		return res, ""
	}
	return res, filepath.Clean(f.Name())
}
