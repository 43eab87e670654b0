package fsm

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
)

type step struct {
	cmd     []byte
	want    []Outcome
	aborted bool
}

func TestApplyRules(t *testing.T) {
	a1, a2 := ent("a", 1, 100), ent("a", 2, 200)
	cases := []struct {
		name  string
		steps []step
		check func(t *testing.T, f *FSM)
	}{
		{
			name:  "commit new key is stored with owner and txn from the command",
			steps: []step{{cmd: commit(1, a1), want: []Outcome{OutcomeStored}}},
			check: func(t *testing.T, f *FSM) {
				e, ok := f.Lookup("a")
				if !ok || e.Owner != "n1" || e.TxnID != id(1) || e.Gen != 1 || e.Sum != 100 {
					t.Fatalf("Lookup(a) = %+v, %v", e, ok)
				}
				if g := f.Generation("a"); g != 1 {
					t.Fatalf("Generation(a) = %d, want 1", g)
				}
			},
		},
		{
			name: "same sum and size from another txn is already stored",
			steps: []step{
				{cmd: commit(1, a1), want: []Outcome{OutcomeStored}},
				{cmd: commit(2, ent("a", 5, 100)), want: []Outcome{OutcomeAlreadyStored}},
			},
			check: func(t *testing.T, f *FSM) {
				r, _ := f.TxnResult(id(2))
				if r.Keys[0].Entry.TxnID != id(1) || r.Keys[0].Entry.Gen != 1 {
					t.Fatalf("AlreadyStored entry = %+v, want the live one from txn 1", r.Keys[0].Entry)
				}
			},
		},
		{
			name: "different sum conflicts",
			steps: []step{
				{cmd: commit(1, a1), want: []Outcome{OutcomeStored}},
				{cmd: commit(2, a2), want: []Outcome{OutcomeConflict}},
			},
			check: func(t *testing.T, f *FSM) {
				if e, _ := f.Lookup("a"); e.Sum != 100 {
					t.Fatalf("conflict replaced the live entry: %+v", e)
				}
			},
		},
		{
			name: "different size conflicts",
			steps: []step{
				{cmd: commit(1, a1), want: []Outcome{OutcomeStored}},
				{cmd: commit(2, func() Entry { e := a1; e.Size = 11; return e }()), want: []Outcome{OutcomeConflict}},
			},
		},
		{
			name: "key twice in one commit: second is judged against the first",
			steps: []step{
				{cmd: commit(1, a1, a1, ent("b", 1, 1), ent("b", 1, 2)),
					want: []Outcome{OutcomeStored, OutcomeAlreadyStored, OutcomeStored, OutcomeConflict}},
			},
		},
		{
			name: "abort records the txn; a later commit of it is a no-op",
			steps: []step{
				{cmd: abort(1), aborted: true},
				{cmd: commit(1, a1), aborted: true},
			},
			check: func(t *testing.T, f *FSM) {
				if _, ok := f.Lookup("a"); ok {
					t.Fatal("commit of an aborted txn stored a key")
				}
			},
		},
		{
			name: "abort after commit returns the commit result",
			steps: []step{
				{cmd: commit(1, a1), want: []Outcome{OutcomeStored}},
				{cmd: abort(1), want: []Outcome{OutcomeStored}},
			},
		},
		{
			name: "remove any generation, then an older write is stale",
			steps: []step{
				{cmd: commit(1, a1), want: []Outcome{OutcomeStored}},
				{cmd: remove(2, KeyGen{Key: "a"}), want: []Outcome{OutcomeRemoved}},
				{cmd: commit(3, a1), want: []Outcome{OutcomeStale}},
				{cmd: commit(4, ent("a", 2, 100)), want: []Outcome{OutcomeStale}},
				{cmd: commit(5, ent("a", 3, 100)), want: []Outcome{OutcomeStored}},
			},
			check: func(t *testing.T, f *FSM) {
				if g := f.Generation("a"); g != 3 {
					t.Fatalf("Generation(a) = %d, want 3", g)
				}
				r, _ := f.TxnResult(id(2))
				if r.Keys[0].Entry.Gen != 1 || r.Keys[0].Entry.TxnID != id(1) {
					t.Fatalf("Removed entry = %+v", r.Keys[0].Entry)
				}
			},
		},
		{
			name: "remove with matching generation",
			steps: []step{
				{cmd: commit(1, ent("a", 7, 1)), want: []Outcome{OutcomeStored}},
				{cmd: remove(2, KeyGen{Key: "a", Gen: 6}), want: []Outcome{OutcomeAbsent}},
				{cmd: remove(3, KeyGen{Key: "a", Gen: 7}), want: []Outcome{OutcomeRemoved}},
			},
			check: func(t *testing.T, f *FSM) {
				if g := f.Generation("a"); g != 8 {
					t.Fatalf("Generation(a) = %d, want 8", g)
				}
			},
		},
		{
			name: "remove with mismatched generation changes nothing",
			steps: []step{
				{cmd: commit(1, ent("a", 7, 1)), want: []Outcome{OutcomeStored}},
				{cmd: remove(2, KeyGen{Key: "a", Gen: 8}), want: []Outcome{OutcomeAbsent}},
			},
			check: func(t *testing.T, f *FSM) {
				if e, ok := f.Lookup("a"); !ok || e.Gen != 7 || f.Generation("a") != 7 {
					t.Fatalf("Lookup(a) = %+v, %v; Generation %d", e, ok, f.Generation("a"))
				}
			},
		},
		{
			name: "remove of an absent key burns a generation so an in-flight commit is stale",
			steps: []step{
				{cmd: remove(1, KeyGen{Key: "a"}, KeyGen{Key: "a"}), want: []Outcome{OutcomeAbsent, OutcomeAbsent}},
				{cmd: commit(2, ent("a", 2, 1)), want: []Outcome{OutcomeStale}},
				{cmd: commit(3, ent("a", 3, 1)), want: []Outcome{OutcomeStored}},
			},
		},
		{
			name: "duplicate txn returns the recorded result unchanged",
			steps: []step{
				{cmd: commit(1, a1), want: []Outcome{OutcomeStored}},
				{cmd: commit(1, ent("b", 1, 1)), want: []Outcome{OutcomeStored}},
				{cmd: remove(1, KeyGen{Key: "a"}), want: []Outcome{OutcomeStored}},
			},
			check: func(t *testing.T, f *FSM) {
				r, _ := f.TxnResult(id(1))
				if r.Index != 1 || r.Type != CmdCommit || r.Keys[0].Key != "a" {
					t.Fatalf("recorded result changed: %+v", r)
				}
				if _, ok := f.Lookup("b"); ok {
					t.Fatal("duplicate txn stored b")
				}
				if _, ok := f.Lookup("a"); !ok {
					t.Fatal("duplicate txn removed a")
				}
			},
		},
		{
			name:  "empty commit is recorded",
			steps: []step{{cmd: commit(1), want: []Outcome{}}, {cmd: commit(1, a1), want: []Outcome{}}},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := New()
			for i, s := range tc.steps {
				r := f.ApplyCommand(uint64(i+1), s.cmd)
				if got := outcomes(r); !slices.Equal(got, s.want) || r.Aborted != s.aborted {
					t.Fatalf("step %d: outcomes %v aborted %v, want %v aborted %v", i, got, r.Aborted, s.want, s.aborted)
				}
				mustCheck(t, f)
			}
			if got := f.AppliedIndex(); got != uint64(len(tc.steps)) {
				t.Fatalf("AppliedIndex = %d, want %d", got, len(tc.steps))
			}
			if tc.check != nil {
				tc.check(t, f)
			}
		})
	}
}

func TestReapplyLowerIndexKeepsMax(t *testing.T) {
	f := New()
	cmd := commit(1, ent("a", 1, 1))
	f.ApplyCommand(5, cmd)
	h := f.Hash()
	r := f.ApplyCommand(3, cmd)
	if r.Index != 5 || f.AppliedIndex() != 5 || f.Hash() != h {
		t.Fatalf("re-apply at lower index changed state: result index %d, applied %d", r.Index, f.AppliedIndex())
	}
	f.ApplyCommand(4, commit(2, ent("b", 1, 1))) // unseen txn at a lower index still applies
	if _, ok := f.Lookup("b"); !ok || f.AppliedIndex() != 5 {
		t.Fatalf("lower-index new txn: applied %d", f.AppliedIndex())
	}
}

func TestResultIsACopy(t *testing.T) {
	f := New()
	r := f.ApplyCommand(1, commit(1, ent("a", 1, 1)))
	r.Keys[0].Outcome = OutcomeConflict
	r2, _ := f.TxnResult(id(1))
	if r2.Keys[0].Outcome != OutcomeStored {
		t.Fatal("mutating a returned Result changed the recorded one")
	}
}

func TestApplyPanicsOnGarbage(t *testing.T) {
	for _, data := range [][]byte{nil, {9, 1}, {byte(CmdCommit), 1, 0xff}, {byte(CmdAbort), 2}} {
		func() {
			defer func() {
				msg, _ := recover().(string)
				if !strings.Contains(msg, "replicas must not diverge") {
					t.Fatalf("ApplyCommand(%x): panic %q, want a divergence panic", data, msg)
				}
			}()
			New().ApplyCommand(1, data)
		}()
	}
}

func TestDecodeErrors(t *testing.T) {
	valid := commit(1, ent("a", 1, 1))
	cases := []struct {
		name string
		data []byte
		want error
	}{
		{"empty", nil, ErrShortCommand},
		{"unknown type", []byte{0, 1}, ErrUnknownCommand},
		{"bad version", []byte{byte(CmdAbort), 9}, ErrBadCommand},
		{"truncated", valid[:len(valid)-1], ErrShortCommand},
		{"trailing", append(slices.Clone(valid), 0), ErrBadCommand},
		{"huge count", append(EncodeCommit(Commit{})[:2+16+1], 0xff, 0xff, 0xff, 0x0f), ErrShortCommand},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if _, _, err := Decode(tc.data); !errors.Is(err, tc.want) {
				t.Fatalf("Decode error %v, want %v", err, tc.want)
			}
		})
	}
}

func TestWatch(t *testing.T) {
	f := New()
	var got []CommandType
	f.Watch(func(r *Result) { got = append(got, r.Type) })
	f.ApplyCommand(1, commit(1, ent("a", 1, 1)))
	f.ApplyCommand(2, commit(1, ent("a", 1, 1)))
	f.ApplyCommand(3, abort(2))
	f.ApplyCommand(4, remove(3, KeyGen{Key: "a"}))
	f.ApplyCommand(5, setMember(4, "n1", "r", "a"))
	if want := []CommandType{CmdCommit, CmdAbort, CmdRemove, CmdMember}; !slices.Equal(got, want) {
		t.Fatalf("watched %v, want %v", got, want)
	}
}

// TestWatchRestore: a Restore reports the live entries it removed and added, by version:
// "a" was removed, "b" replaced by a new generation, "c" added, "d" unchanged.
func TestWatchRestore(t *testing.T) {
	f := New()
	f.ApplyCommand(1, commit(1, ent("a", 1, 1), ent("b", 1, 2), ent("d", 1, 4)))
	leader := New()
	leader.ApplyCommand(1, commit(1, ent("a", 1, 1), ent("b", 1, 2), ent("d", 1, 4)))
	leader.ApplyCommand(2, remove(2, KeyGen{Key: "a"}, KeyGen{Key: "b"}))
	leader.ApplyCommand(3, commit(3, ent("b", 3, 5), ent("c", 1, 3)))
	var buf bytes.Buffer
	if _, err := leader.Snapshot().WriteTo(&buf); err != nil {
		t.Fatal(err)
	}
	var got RestoreDiff
	f.WatchRestore(func(d RestoreDiff) { got = d })
	if err := f.Restore(&buf); err != nil {
		t.Fatal(err)
	}
	keys := func(es []Entry) []string {
		var ks []string
		for _, e := range es {
			ks = append(ks, fmt.Sprintf("%s@%d", e.Key, e.Gen))
		}
		slices.Sort(ks)
		return ks
	}
	if got.From != 1 || got.To != 3 || !slices.Equal(keys(got.Gone), []string{"a@1", "b@1"}) || !slices.Equal(keys(got.Added), []string{"b@3", "c@1"}) {
		t.Fatalf("diff: from %d to %d, gone %v, added %v", got.From, got.To, keys(got.Gone), keys(got.Added))
	}
}

func TestStatsForEach(t *testing.T) {
	f := New()
	f.ApplyCommand(1, commit(1, ent("c", 1, 1), ent("a", 1, 2), ent("b", 1, 3)))
	f.ApplyCommand(2, remove(2, KeyGen{Key: "b"}, KeyGen{Key: "z"}))
	f.ApplyCommand(3, abort(3))
	f.ApplyCommand(4, setMember(4, "n1", "r", "a"))
	want := Stats{Keys: 2, Bytes: 20, Generations: 4, Txns: 4, Members: 1, AppliedIndex: 4}
	if got := f.Stats(); got != want {
		t.Fatalf("Stats = %+v, want %+v", got, want)
	}
	var keys []string
	f.ForEach(func(e Entry) bool { keys = append(keys, e.Key); return true })
	if !slices.Equal(keys, []string{"a", "c"}) {
		t.Fatalf("ForEach keys %v", keys)
	}
	keys = nil
	f.ForEach(func(e Entry) bool { keys = append(keys, e.Key); return false })
	if len(keys) != 1 {
		t.Fatalf("ForEach did not stop: %v", keys)
	}
	all := f.LiveOf("n1")
	slices.SortFunc(all, func(a, b Entry) int { return strings.Compare(a.Key, b.Key) })
	if len(all) != 2 || all[0] != mustLookup(t, f, "a") || all[1] != mustLookup(t, f, "c") {
		t.Fatalf("LiveOf entries %+v", all)
	}
	if cap(all) != 2 {
		t.Fatalf("LiveOf's copy has room for %d entries; n1 owns 2", cap(all))
	}
	if other := f.LiveOf("n2"); len(other) != 0 {
		t.Fatalf("LiveOf another owner: %+v", other)
	}
}

func mustLookup(t *testing.T, f *FSM, key string) Entry {
	t.Helper()
	e, ok := f.Lookup(key)
	if !ok {
		t.Fatalf("%q not live", key)
	}
	return e
}

func TestSnapshotRestore(t *testing.T) {
	f := New()
	f.ApplyCommand(1, commit(1, ent("a", 1, 1), ent("b", 2, 2)))
	f.ApplyCommand(2, remove(2, KeyGen{Key: "a"}, KeyGen{Key: "x"}))
	f.ApplyCommand(3, abort(3))
	f.ApplyCommand(4, commit(4))
	f.ApplyCommand(5, setMember(5, "n1", "r1", "a1"))
	var buf bytes.Buffer
	n, err := f.Snapshot().WriteTo(&buf)
	if err != nil || n != int64(buf.Len()) {
		t.Fatalf("WriteTo = %d, %v (buffer %d)", n, err, buf.Len())
	}
	g := New()
	if err := g.Restore(bytes.NewReader(buf.Bytes())); err != nil {
		t.Fatalf("Restore: %v", err)
	}
	if g.Hash() != f.Hash() || g.Stats() != f.Stats() {
		t.Fatalf("restored hash/stats differ: %+v vs %+v", g.Stats(), f.Stats())
	}
	for _, txn := range []byte{1, 2, 3, 4, 5} {
		a, _ := f.TxnResult(id(txn))
		b, _ := g.TxnResult(id(txn))
		if !equalResult(a, b) {
			t.Fatalf("txn %d: restored %+v, want %+v", txn, b, a)
		}
	}
	mustCheck(t, g)

	// Every single-byte corruption or truncation is refused and leaves the FSM unchanged.
	h := g.Hash()
	data := buf.Bytes()
	for i := range data {
		bad := slices.Clone(data)
		bad[i] ^= 0x41
		if err := g.Restore(bytes.NewReader(bad)); !errors.Is(err, ErrBadSnapshot) {
			t.Fatalf("flip at %d: Restore error %v, want ErrBadSnapshot", i, err)
		}
		if err := g.Restore(bytes.NewReader(data[:i])); !errors.Is(err, ErrBadSnapshot) {
			t.Fatalf("truncate at %d: Restore error %v, want ErrBadSnapshot", i, err)
		}
	}
	if g.Hash() != h {
		t.Fatal("failed Restore changed the FSM")
	}
}

func equalResult(a, b *Result) bool {
	return a.TxnID == b.TxnID && a.Type == b.Type && a.Index == b.Index &&
		a.Aborted == b.Aborted && slices.Equal(a.Keys, b.Keys)
}

func TestStrings(t *testing.T) {
	if s := (TxnID{0xab, 1}).String(); s != "ab010000000000000000000000000000" {
		t.Fatalf("TxnID.String = %q", s)
	}
	for o := OutcomeStored; o <= OutcomeAbsent; o++ {
		if strings.HasPrefix(o.String(), "Outcome(") {
			t.Fatalf("outcome %d has no name", o)
		}
	}
	if Outcome(0).String() != "Outcome(0)" || CommandType(9).String() != "CommandType(9)" {
		t.Fatal("unknown values not named by number")
	}
}

// Prune drops the results of transactions applied below its watermark, keeps newer ones,
// and a pruned commit re-applied changes nothing (its keys are already stored).
func TestPruneBoundsTxnResults(t *testing.T) {
	f := New()
	var ids []TxnID
	for i := range 10 {
		id := TxnID{byte(i + 1)}
		ids = append(ids, id)
		f.ApplyCommand(uint64(i+1), EncodeCommit(Commit{TxnID: id, Node: "n1", Entries: []Entry{
			{Key: fmt.Sprintf("k%d", i), Extent: Extent{Bucket: 1, Offset: int64(i) * 4096, Length: 4096}, Size: 1, Sum: 7, Gen: 1},
		}}))
	}
	res := f.ApplyCommand(11, EncodePrune(Prune{TxnID: TxnID{0xff}, Before: 6}))
	if res.Type != CmdPrune || f.Stats().Txns != 5+1 {
		t.Fatalf("after pruning below 6: %d results (want 5 kept + the prune's own), result %+v", f.Stats().Txns, res)
	}
	if _, ok := f.TxnResult(ids[0]); ok {
		t.Fatal("a result below the watermark survived")
	}
	if _, ok := f.TxnResult(ids[9]); !ok {
		t.Fatal("a result above the watermark was dropped")
	}
	before := f.Stats().Keys
	again := f.ApplyCommand(12, EncodeCommit(Commit{TxnID: ids[0], Node: "n1", Entries: []Entry{
		{Key: "k0", Extent: Extent{Bucket: 1, Offset: 0, Length: 4096}, Size: 1, Sum: 7, Gen: 1},
	}}))
	if again.Keys[0].Outcome != OutcomeAlreadyStored || f.Stats().Keys != before {
		t.Fatalf("re-applied pruned commit: %+v, keys %d -> %d", again.Keys, before, f.Stats().Keys)
	}
}

// LookupEach reports what Lookup and Generation report one key at a time: a live key's entry,
// a removed key's burnt generation, a key never seen at generation 0.
func TestLookupEachAgreesWithLookup(t *testing.T) {
	f := New()
	f.ApplyCommand(1, commit(1, ent("live", 1, 1), ent("gone", 1, 2)))
	f.ApplyCommand(2, remove(2, KeyGen{Key: "gone"}))
	keys := []string{"live", "gone", "never", "live"}
	seen := 0
	f.LookupEach(len(keys), func(i int) string { return keys[i] }, func(i int, e Entry, live bool, gen uint64) {
		seen++
		we, wlive := f.st.live.get(keys[i])
		if e != we || live != wlive || gen != f.st.gen(keys[i]) {
			t.Errorf("key %q: LookupEach gave %+v %v gen %d; Lookup %+v %v, Generation %d", keys[i], e, live, gen, we, wlive, f.st.gen(keys[i]))
		}
	})
	if seen != len(keys) {
		t.Fatalf("fn called %d times for %d keys", seen, len(keys))
	}
	if _, live := f.Lookup("gone"); live || f.Generation("gone") != 2 {
		t.Fatalf("the removed key: live %v, generation %d; want not live at generation 2", live, f.Generation("gone"))
	}
}
