package fsm

import (
	"bytes"
	"flag"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"pgregory.net/rapid"
)

// seedFlag reproduces TestRandomLog; 0 picks a seed from the clock. rapid
// tests take -rapid.seed and print the failing seed themselves.
var seedFlag = flag.Uint64("fsm.seed", 0, "seed for TestRandomLog (0 = time-based)")

// Small key, txn and generation spaces, so duplicates, conflicts, stale
// writes and removes of live keys are all common.
var (
	propKeys = []string{"a", "b", "c", "d"}
	propTxns = 12
)

func genCommand(t *rapid.T) []byte {
	txn := byte(rapid.IntRange(0, propTxns-1).Draw(t, "txn"))
	switch rapid.IntRange(0, 5).Draw(t, "kind") {
	case 0:
		return abort(txn)
	case 1, 2:
		n := rapid.IntRange(0, 3).Draw(t, "nremove")
		var keys []KeyGen
		for range n {
			keys = append(keys, KeyGen{
				Key: rapid.SampledFrom(propKeys).Draw(t, "rkey"),
				Gen: rapid.Uint64Range(0, 4).Draw(t, "rgen"),
			})
		}
		return remove(txn, keys...)
	default:
		n := rapid.IntRange(0, 4).Draw(t, "nentries")
		var es []Entry
		for range n {
			e := ent(rapid.SampledFrom(propKeys).Draw(t, "key"),
				rapid.Uint64Range(0, 6).Draw(t, "gen"), rapid.Uint64Range(1, 2).Draw(t, "sum"))
			es = append(es, e)
		}
		return EncodeCommit(Commit{TxnID: id(txn), Node: rapid.SampledFrom([]string{"n1", "n2"}).Draw(t, "node"), Entries: es})
	}
}

// TestPropertyLog checks, for random logs with duplicate txns and
// re-applies: every step keeps the invariants and matches the model; applying
// any prefix twice gives the same Hash; Snapshot -> Restore gives the same
// Hash; replaying the rest of the log (plus any overlap) onto the restored
// FSM gives the live Hash.
func TestPropertyLog(t *testing.T) {
	t.Log("randomized with rapid: reproduce a failure with the -rapid.seed it prints")
	rapid.Check(t, func(t *rapid.T) {
		log := rapid.SliceOfN(rapid.Custom(genCommand), 1, 40).Draw(t, "log")
		f, m := New(), newModel()
		hashes := []uint64{f.Hash()} // hashes[k] = hash after log[:k]
		for i, cmd := range log {
			got := f.ApplyCommand(uint64(i+1), cmd)
			want := m.apply(uint64(i+1), cmd)
			if !equalResult(got, want) {
				t.Fatalf("index %d: result %+v, model %+v", i+1, got, want)
			}
			mustCheck(t, f)
			hashes = append(hashes, f.Hash())
			if j := rapid.IntRange(0, i).Draw(t, "reapply"); j < i {
				f.ApplyCommand(uint64(j+1), log[j]) // a re-apply changes nothing
				if f.Hash() != hashes[i+1] {
					t.Fatalf("re-applying index %d after %d changed the hash", j+1, i+1)
				}
			}
		}
		for _, key := range propKeys {
			e, ok := f.Lookup(key)
			me, mok := m.live[key]
			if ok != mok || e != me || f.Generation(key) != m.gens[key] {
				t.Fatalf("key %q: fsm %+v %v gen %d, model %+v %v gen %d", key, e, ok, f.Generation(key), me, mok, m.gens[key])
			}
		}

		k := rapid.IntRange(0, len(log)).Draw(t, "prefix")
		twice := New()
		for range 2 {
			for i, cmd := range log[:k] {
				twice.ApplyCommand(uint64(i+1), cmd)
			}
		}
		if twice.Hash() != hashes[k] {
			t.Fatalf("prefix %d applied twice: hash %x, want %x", k, twice.Hash(), hashes[k])
		}

		var buf bytes.Buffer
		if _, err := twice.Snapshot().WriteTo(&buf); err != nil {
			t.Fatalf("WriteTo: %v", err)
		}
		restored := New()
		if err := restored.Restore(&buf); err != nil {
			t.Fatalf("Restore: %v", err)
		}
		if restored.Hash() != hashes[k] {
			t.Fatalf("restore of prefix %d: hash %x, want %x", k, restored.Hash(), hashes[k])
		}
		from := rapid.IntRange(0, k).Draw(t, "replayFrom") // raft replays after the snapshot; overlap is harmless
		for i := from; i < len(log); i++ {
			restored.ApplyCommand(uint64(i+1), log[i])
		}
		if restored.Hash() != f.Hash() {
			t.Fatalf("snapshot at %d + replay from %d: hash %x, live %x", k, from+1, restored.Hash(), f.Hash())
		}
	})
}

// TestRandomLog is the same idea with a long log and a plain seed: apply a
// long random log, snapshotting at random points into a "restarted" replica
// that replays from its snapshot; both must end with the same Hash.
func TestRandomLog(t *testing.T) {
	seed := *seedFlag
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	t.Logf("seed %d (rerun with -fsm.seed=%d)", seed, seed)
	rng := rand.New(rand.NewPCG(seed, seed>>1|1))
	const n = 3000
	log := make([][]byte, n)
	for i := range log {
		txn := byte(rng.IntN(200))
		key := func() string { return fmt.Sprintf("k%d", rng.IntN(50)) }
		switch rng.IntN(6) {
		case 0:
			log[i] = abort(txn)
		case 1:
			log[i] = remove(txn, KeyGen{Key: key(), Gen: uint64(rng.IntN(3))}, KeyGen{Key: key()})
		default:
			log[i] = commit(txn, ent(key(), uint64(rng.IntN(40)), uint64(rng.IntN(2))), ent(key(), uint64(rng.IntN(40)), 1))
		}
	}
	live, replica := New(), New()
	var snap bytes.Buffer
	snapAt := 0
	for i, cmd := range log {
		live.ApplyCommand(uint64(i+1), cmd)
		if rng.IntN(300) == 0 {
			snap.Reset()
			if _, err := live.Snapshot().WriteTo(&snap); err != nil {
				t.Fatal(err)
			}
			snapAt = i + 1
		}
	}
	if snapAt > 0 {
		if err := replica.Restore(&snap); err != nil {
			t.Fatalf("Restore: %v", err)
		}
	}
	for i := snapAt; i < n; i++ {
		replica.ApplyCommand(uint64(i+1), log[i])
	}
	mustCheck(t, live)
	if replica.Hash() != live.Hash() {
		t.Fatalf("replica from snapshot at %d: hash %x, live %x", snapAt, replica.Hash(), live.Hash())
	}
	t.Logf("stats %+v, snapshot at %d", live.Stats(), snapAt)
}

// model is a straightforward restatement of the apply rules, to compare against.
type model struct {
	live map[string]Entry
	gens map[string]uint64
	txns map[TxnID]*Result
}

func newModel() *model {
	return &model{live: map[string]Entry{}, gens: map[string]uint64{}, txns: map[TxnID]*Result{}}
}

func (m *model) apply(index uint64, data []byte) *Result {
	_, v, err := Decode(data)
	if err != nil {
		panic(err)
	}
	id, _ := commandTxn(v)
	if r := m.txns[id]; r != nil {
		return r
	}
	var r *Result
	switch c := v.(type) {
	case Commit:
		r = &Result{TxnID: c.TxnID, Type: CmdCommit, Index: index, Keys: []KeyOutcome{}}
		for _, e := range c.Entries {
			cur, ok := m.live[e.Key]
			switch {
			case ok && cur.Sum == e.Sum && cur.Size == e.Size:
				r.Keys = append(r.Keys, KeyOutcome{e.Key, OutcomeAlreadyStored, cur})
			case ok:
				r.Keys = append(r.Keys, KeyOutcome{e.Key, OutcomeConflict, cur})
			case e.Gen <= m.gens[e.Key]:
				r.Keys = append(r.Keys, KeyOutcome{Key: e.Key, Outcome: OutcomeStale})
			default:
				m.live[e.Key], m.gens[e.Key] = e, e.Gen
				r.Keys = append(r.Keys, KeyOutcome{e.Key, OutcomeStored, e})
			}
		}
	case Abort:
		r = &Result{TxnID: c.TxnID, Type: CmdAbort, Index: index, Aborted: true}
	case Remove:
		r = &Result{TxnID: c.TxnID, Type: CmdRemove, Index: index, Keys: []KeyOutcome{}}
		for _, kg := range c.Keys {
			cur, ok := m.live[kg.Key]
			if ok && (kg.Gen == 0 || kg.Gen == cur.Gen) {
				delete(m.live, kg.Key)
				m.gens[kg.Key] = max(m.gens[kg.Key], cur.Gen) + 1
				r.Keys = append(r.Keys, KeyOutcome{kg.Key, OutcomeRemoved, cur})
				continue
			}
			if !ok {
				m.gens[kg.Key]++
			}
			r.Keys = append(r.Keys, KeyOutcome{Key: kg.Key, Outcome: OutcomeAbsent})
		}
	}
	m.txns[r.TxnID] = r
	return r
}
