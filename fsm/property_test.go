package fsm

import (
	"bytes"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"testing"

	"pgregory.net/rapid"

	"github.com/kvoffload/kvoffload/internal/testkit"
)

// Small key, txn and generation spaces, so duplicates, conflicts, stale
// writes and removes of live keys are all common.
var (
	propKeys  = []string{"a", "b", "c", "d"}
	propTxns  = 12
	propNodes = []string{"n1", "n2", "n3"}
)

func genCommand(t *rapid.T) []byte {
	txn := byte(rapid.IntRange(0, propTxns-1).Draw(t, "txn"))
	switch rapid.IntRange(0, 7).Draw(t, "kind") {
	case 0:
		return abort(txn)
	case 6:
		return setMember(txn, rapid.SampledFrom(propNodes).Draw(t, "member"),
			rapid.SampledFrom([]string{"r1", "r2"}).Draw(t, "raftAddr"), rapid.SampledFrom([]string{"", "a1"}).Draw(t, "apiAddr"))
	case 7:
		return delMember(txn, rapid.SampledFrom(propNodes).Draw(t, "member"))
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
			e := entShared(rapid.SampledFrom(propKeys).Draw(t, "key"),
				rapid.Uint64Range(0, 6).Draw(t, "gen"), rapid.Uint64Range(1, 2).Draw(t, "sum"))
			es = append(es, e)
		}
		return EncodeCommit(Commit{TxnID: id(txn), Node: rapid.SampledFrom(propNodes[:2]).Draw(t, "node"), Entries: es})
	}
}

// TestPropertyLog checks, for random logs with duplicate txns and
// re-applies: every step keeps the invariants and matches the model (live
// keys, generations, members, and the per-owner counters against a recount
// of the model's live keys); applying
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
			if got, want := f.Owners(), m.owners(); !maps.Equal(got, want) {
				t.Fatalf("index %d: Owners %v, recount %v", i+1, got, want)
			}
			if got, want := f.Members(), m.sortedMembers(); !slices.Equal(got, want) {
				t.Fatalf("index %d: Members %+v, model %+v", i+1, got, want)
			}
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
		mustCheck(t, restored) // Restore checks only what the bytes could break (checkDecoded)
		if restored.Hash() != hashes[k] {
			t.Fatalf("restore of prefix %d: hash %x, want %x", k, restored.Hash(), hashes[k])
		}
		if got, want := restored.Owners(), twice.Owners(); !maps.Equal(got, want) {
			t.Fatalf("restore of prefix %d: Owners %v, want %v", k, got, want)
		}
		from := rapid.IntRange(0, k).Draw(t, "replayFrom") // raft replays after the snapshot; overlap is harmless
		for i := from; i < len(log); i++ {
			restored.ApplyCommand(uint64(i+1), log[i])
		}
		if restored.Hash() != f.Hash() || !maps.Equal(restored.Owners(), f.Owners()) {
			t.Fatalf("snapshot at %d + replay from %d: hash %x, live %x", k, from+1, restored.Hash(), f.Hash())
		}
	})
}

// TestRandomLog is the same idea with a long log and a plain seed: apply a
// long random log, snapshotting at random points into a "restarted" replica
// that replays from its snapshot; both must end with the same Hash.
func TestRandomLog(t *testing.T) {
	seed := testkit.Seed(t)
	rng := rand.New(rand.NewPCG(seed, seed>>1|1))
	const n = 3000
	log := make([][]byte, n)
	for i := range log {
		txn := byte(rng.IntN(200))
		key := func() string { return fmt.Sprintf("k%d", rng.IntN(50)) }
		switch rng.IntN(7) {
		case 0:
			log[i] = abort(txn)
		case 6:
			node := fmt.Sprintf("n%d", rng.IntN(4))
			if rng.IntN(3) == 0 {
				log[i] = delMember(txn, node)
			} else {
				log[i] = setMember(txn, node, fmt.Sprintf("r%d", rng.IntN(3)), "a")
			}
		case 1:
			log[i] = remove(txn, KeyGen{Key: key(), Gen: uint64(rng.IntN(3))}, KeyGen{Key: key()})
		default:
			log[i] = EncodeCommit(Commit{TxnID: id(txn), Node: fmt.Sprintf("n%d", rng.IntN(4)), Entries: []Entry{
				entShared(key(), uint64(rng.IntN(40)), uint64(rng.IntN(2))), ent(key(), uint64(rng.IntN(40)), 1)}})
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
	if replica.Hash() != live.Hash() || !maps.Equal(replica.Owners(), live.Owners()) {
		t.Fatalf("replica from snapshot at %d: hash %x, live %x", snapAt, replica.Hash(), live.Hash())
	}
	t.Logf("stats %+v, snapshot at %d", live.Stats(), snapAt)
}

// model is a straightforward restatement of the apply rules, to compare against.
type model struct {
	live    map[string]Entry
	gens    map[string]uint64
	txns    map[TxnID]*Result
	members map[string]Member
}

func newModel() *model {
	return &model{live: map[string]Entry{}, gens: map[string]uint64{}, txns: map[TxnID]*Result{}, members: map[string]Member{}}
}

// owners recounts the model's live entries per owner.
func (m *model) owners() map[string]OwnerStats {
	out := map[string]OwnerStats{}
	for _, e := range m.live {
		o := out[e.Owner]
		o.Keys++
		o.Bytes += int64(e.Size)
		out[e.Owner] = o
	}
	return out
}

// overlapped reports, by a scan of every live entry, whether x overlaps a live extent of
// owner: the model of the FSM's extent index.
func (m *model) overlapped(owner string, x Extent) bool {
	for _, e := range m.live {
		if e.Owner == owner && e.Extent.Bucket == x.Bucket && x.Length > 0 && e.Extent.Length > 0 &&
			x.Offset < e.Extent.Offset+e.Extent.Length && e.Extent.Offset < x.Offset+x.Length {
			return true
		}
	}
	return false
}

func (m *model) sortedMembers() []Member {
	var out []Member
	for _, k := range slices.Sorted(maps.Keys(m.members)) {
		out = append(out, m.members[k])
	}
	return out
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
				r.Keys = append(r.Keys, KeyOutcome{Key: e.Key, Outcome: OutcomeAlreadyStored, Entry: cur})
			case ok:
				r.Keys = append(r.Keys, KeyOutcome{Key: e.Key, Outcome: OutcomeConflict, Entry: cur})
			case e.Gen <= m.gens[e.Key]:
				r.Keys = append(r.Keys, KeyOutcome{Key: e.Key, Outcome: OutcomeStale})
			case m.overlapped(e.Owner, e.Extent):
				r.Keys = append(r.Keys, KeyOutcome{Key: e.Key, Outcome: OutcomeInvalid})
			default:
				m.live[e.Key], m.gens[e.Key] = e, e.Gen
				r.Keys = append(r.Keys, KeyOutcome{Key: e.Key, Outcome: OutcomeStored, Entry: e})
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
				r.Keys = append(r.Keys, KeyOutcome{Key: kg.Key, Outcome: OutcomeRemoved, Entry: cur, Shared: m.overlapped(cur.Owner, cur.Extent)})
				continue
			}
			if !ok {
				m.gens[kg.Key]++
			}
			r.Keys = append(r.Keys, KeyOutcome{Key: kg.Key, Outcome: OutcomeAbsent})
		}
	case SetMember:
		r = &Result{TxnID: c.TxnID, Type: CmdMember, Index: index}
		if c.Remove {
			delete(m.members, c.Member.NodeID)
		} else {
			m.members[c.Member.NodeID] = c.Member
		}
	}
	m.txns[r.TxnID] = r
	return r
}
