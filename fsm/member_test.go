package fsm

import (
	"bytes"
	"errors"
	"maps"
	"slices"
	"testing"
)

func TestMembers(t *testing.T) {
	n1 := Member{NodeID: "n1", RaftAddr: "r1", APIAddr: "a1"}
	n2 := Member{NodeID: "n2", RaftAddr: "r2", APIAddr: "a2"}
	n1moved := Member{NodeID: "n1", RaftAddr: "r1b", APIAddr: "a1b"}
	cases := []struct {
		name string
		cmds [][]byte
		want []Member
	}{
		{"set one", [][]byte{setMember(1, "n1", "r1", "a1")}, []Member{n1}},
		{"sorted by node", [][]byte{setMember(1, "n2", "r2", "a2"), setMember(2, "n1", "r1", "a1")}, []Member{n1, n2}},
		{"set again replaces", [][]byte{setMember(1, "n1", "r1", "a1"), setMember(2, "n1", "r1b", "a1b")}, []Member{n1moved}},
		{"remove", [][]byte{setMember(1, "n1", "r1", "a1"), setMember(2, "n2", "r2", "a2"), delMember(3, "n1")}, []Member{n2}},
		{"remove absent is a no-op", [][]byte{setMember(1, "n2", "r2", "a2"), delMember(2, "n1")}, []Member{n2}},
		{"remove ignores the addresses", [][]byte{setMember(1, "n1", "r1", "a1"),
			EncodeSetMember(SetMember{TxnID: id(2), Member: Member{NodeID: "n1", RaftAddr: "other"}, Remove: true})}, nil},
		{"duplicate txn is a no-op", [][]byte{setMember(1, "n1", "r1", "a1"), setMember(1, "n2", "r2", "a2"), delMember(1, "n1")}, []Member{n1}},
		{"txn shared with a commit is a no-op", [][]byte{commit(1, ent("a", 1, 1)), setMember(1, "n1", "r1", "a1")}, nil},
		{"member txn blocks a later commit", [][]byte{setMember(1, "n1", "r1", "a1"), commit(1, ent("a", 1, 1))}, []Member{n1}},
		{"remove then set again", [][]byte{setMember(1, "n1", "r1", "a1"), delMember(2, "n1"), setMember(3, "n1", "r1b", "a1b")}, []Member{n1moved}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := New()
			for i, c := range tc.cmds {
				f.ApplyCommand(uint64(i+1), c)
				mustCheck(t, f)
			}
			if got := f.Members(); !slices.Equal(got, tc.want) {
				t.Fatalf("Members = %+v, want %+v", got, tc.want)
			}
			for _, m := range tc.want {
				if got, ok := f.Member(m.NodeID); !ok || got != m {
					t.Fatalf("Member(%q) = %+v, %v", m.NodeID, got, ok)
				}
			}
			if got := f.Stats().Members; got != len(tc.want) {
				t.Fatalf("Stats.Members = %d, want %d", got, len(tc.want))
			}
			if _, ok := f.Member("nobody"); ok {
				t.Fatal("Member(nobody) found")
			}
		})
	}
}

func TestMemberResult(t *testing.T) {
	f := New()
	var watched []*Result
	f.Watch(func(r *Result) { watched = append(watched, r) })
	r := f.ApplyCommand(7, setMember(1, "n1", "r1", "a1"))
	if r.Type != CmdMember || r.Index != 7 || r.Aborted || r.Keys != nil || r.TxnID != id(1) {
		t.Fatalf("member result %+v", r)
	}
	again := f.ApplyCommand(8, delMember(1, "n1"))
	if !equalResult(again, r) || again.Keys != nil {
		t.Fatalf("duplicate member txn returned %+v, want %+v", again, r)
	}
	if _, ok := f.Member("n1"); !ok {
		t.Fatal("duplicate txn removed the member")
	}
	if len(watched) != 1 || watched[0].Type != CmdMember {
		t.Fatalf("watched %+v, want one member result", watched)
	}
	if CmdMember.String() != "member" {
		t.Fatalf("CmdMember.String() = %q", CmdMember.String())
	}
	ms := f.Members()
	ms[0].APIAddr = "changed"
	if m, _ := f.Member("n1"); m.APIAddr != "a1" {
		t.Fatal("Members returned shared memory")
	}
}

func TestDecodeMember(t *testing.T) {
	sm := SetMember{TxnID: id(3), Member: Member{NodeID: "n1", RaftAddr: "10.0.0.1:7000", APIAddr: "[::1]:8000", PeerAddr: "10.0.0.1:7300"}, Remove: true}
	typ, v, err := Decode(EncodeSetMember(sm))
	if err != nil || typ != CmdMember || v.(SetMember) != sm {
		t.Fatalf("Decode = %v %+v %v, want %+v", typ, v, err, sm)
	}
	valid := setMember(1, "n1", "r", "a")
	badBool := slices.Clone(valid)
	badBool[2+16] = 2
	for _, tc := range []struct {
		name string
		data []byte
		want error
	}{
		{"empty node", setMember(1, "", "r", "a"), ErrBadCommand},
		{"bad remove byte", badBool, ErrBadCommand},
		{"truncated", valid[:len(valid)-1], ErrShortCommand},
		{"trailing", append(slices.Clone(valid), 0), ErrBadCommand},
		{"bad version", []byte{byte(CmdMember), 3}, ErrBadCommand},
		{"member version on a commit", []byte{byte(CmdCommit), memberVersion}, ErrBadCommand},
		{"unknown type after cluster", []byte{byte(CmdCluster) + 1, 1}, ErrUnknownCommand},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, _, err := Decode(tc.data); !errors.Is(err, tc.want) {
				t.Fatalf("Decode error %v, want %v", err, tc.want)
			}
		})
	}
}

// TestDecodeMemberVersion1 reads a Member command written before the peer address existed:
// its record has no peer addr, and PeerTarget falls back to the API address.
func TestDecodeMemberVersion1(t *testing.T) {
	v1 := append([]byte{byte(CmdMember), commandVersion}, make([]byte, 16)...) // txn
	v1 = append(v1, 0, 2, 'n', '1', 1, 'r', 1, 'a')                            // remove, node, raft, api
	_, v, err := Decode(v1)
	if err != nil {
		t.Fatal(err)
	}
	m := v.(SetMember).Member
	if m != (Member{NodeID: "n1", RaftAddr: "r", APIAddr: "a"}) || m.PeerTarget() != "a" {
		t.Fatalf("decoded %+v (peer target %q), want n1/r/a with peer target a", m, m.PeerTarget())
	}
}

func TestSnapshotWithMembers(t *testing.T) {
	f := New()
	f.ApplyCommand(1, commit(1, ent("a", 1, 1)))
	h0 := f.Hash()
	f.ApplyCommand(2, setMember(2, "n2", "r2", "a2"))
	h1 := f.Hash()
	f.ApplyCommand(3, setMember(3, "n1", "r1", "a1"))
	h2 := f.Hash()
	f.ApplyCommand(4, setMember(4, "n1", "r1", "a1-moved"))
	h3 := f.Hash()
	if h0 == h1 || h1 == h2 || h2 == h3 {
		t.Fatalf("member changes did not change Hash: %x %x %x %x", h0, h1, h2, h3)
	}
	// Same txns, same indexes, only an address differs: the Hash differs.
	g := New()
	g.ApplyCommand(1, commit(1, ent("a", 1, 1)))
	g.ApplyCommand(2, setMember(2, "n2", "r2", "a2-other"))
	if g.Hash() == h1 {
		t.Fatal("Hash ignores member addresses")
	}

	var buf bytes.Buffer
	if _, err := f.Snapshot().WriteTo(&buf); err != nil {
		t.Fatal(err)
	}
	r := New()
	if err := r.Restore(bytes.NewReader(buf.Bytes())); err != nil {
		t.Fatalf("Restore: %v", err)
	}
	if r.Hash() != f.Hash() || r.Stats() != f.Stats() || !slices.Equal(r.Members(), f.Members()) {
		t.Fatalf("restored %+v %+v, want %+v %+v", r.Stats(), r.Members(), f.Stats(), f.Members())
	}
	for _, txn := range []byte{2, 3, 4} {
		a, _ := f.TxnResult(id(txn))
		b, _ := r.TxnResult(id(txn))
		if !equalResult(a, b) || b.Keys != nil {
			t.Fatalf("txn %d: restored %+v, want %+v", txn, b, a)
		}
	}
	mustCheck(t, r)
	if res := r.ApplyCommand(5, delMember(3, "n1")); res.Index != 3 { // de-duplicated after restore
		t.Fatalf("re-applied member txn after restore: %+v", res)
	}
	if _, ok := r.Member("n1"); !ok || r.AppliedIndex() != 5 {
		t.Fatal("restored FSM did not de-duplicate a member txn")
	}

	// A version-1 snapshot (no members section) is refused.
	old := slices.Clone(buf.Bytes())
	old[4] = 1
	if err := New().Restore(bytes.NewReader(old)); !errors.Is(err, ErrBadSnapshot) {
		t.Fatalf("version 1 snapshot: %v, want ErrBadSnapshot", err)
	}
}

func TestOwners(t *testing.T) {
	f := New()
	if got := f.Owners(); len(got) != 0 {
		t.Fatalf("empty FSM Owners = %v", got)
	}
	e := func(key string, size uint32) Entry { x := ent(key, 1, 1); x.Size = size; return x }
	f.ApplyCommand(1, EncodeCommit(Commit{TxnID: id(1), Node: "n1", Entries: []Entry{e("a", 10), e("b", 20)}}))
	f.ApplyCommand(2, EncodeCommit(Commit{TxnID: id(2), Node: "n2", Entries: []Entry{e("c", 5), e("a", 99)}})) // a conflicts
	want := map[string]OwnerStats{"n1": {Keys: 2, Bytes: 30}, "n2": {Keys: 1, Bytes: 5}}
	if got := f.Owners(); !maps.Equal(got, want) {
		t.Fatalf("Owners = %v, want %v", got, want)
	}
	f.ApplyCommand(3, remove(3, KeyGen{Key: "c"}, KeyGen{Key: "a"}))
	want = map[string]OwnerStats{"n1": {Keys: 1, Bytes: 20}}
	if got := f.Owners(); !maps.Equal(got, want) {
		t.Fatalf("after remove Owners = %v, want %v (an owner without keys is absent)", got, want)
	}
	f.Owners()["n1"] = OwnerStats{}
	if got := f.Owners(); !maps.Equal(got, want) {
		t.Fatal("Owners returned the internal map")
	}
	var buf bytes.Buffer
	if _, err := f.Snapshot().WriteTo(&buf); err != nil {
		t.Fatal(err)
	}
	g := New()
	if err := g.Restore(&buf); err != nil {
		t.Fatal(err)
	}
	if got := g.Owners(); !maps.Equal(got, want) {
		t.Fatalf("restored Owners = %v, want %v", got, want)
	}
}

// TestSetCluster: the first SetCluster sets the ID, the same ID again is a no-op, another ID
// is refused and changes nothing; the ID survives a snapshot round trip.
func TestSetCluster(t *testing.T) {
	f := New()
	apply := func(i uint64, txn byte, cid string) *Result {
		t.Helper()
		return f.ApplyCommand(i, EncodeSetCluster(SetCluster{TxnID: id(txn), ID: cid}))
	}
	if r := apply(1, 1, "A"); r.Aborted || f.ClusterID() != "A" {
		t.Fatalf("first SetCluster: %+v, ID %q", r, f.ClusterID())
	}
	if r := apply(2, 2, "A"); r.Aborted || f.ClusterID() != "A" {
		t.Fatalf("same ID again: %+v, ID %q", r, f.ClusterID())
	}
	if r := apply(3, 3, "B"); !r.Aborted || f.ClusterID() != "A" {
		t.Fatalf("another ID: %+v, ID %q, want refused and A kept", r, f.ClusterID())
	}
	var buf bytes.Buffer
	if _, err := f.Snapshot().WriteTo(&buf); err != nil {
		t.Fatal(err)
	}
	g := New()
	if err := g.Restore(&buf); err != nil || g.ClusterID() != "A" {
		t.Fatalf("restored ID %q (%v), want A", g.ClusterID(), err)
	}
	if _, _, err := Decode(EncodeSetCluster(SetCluster{TxnID: id(4)})); !errors.Is(err, ErrBadCommand) {
		t.Fatalf("empty cluster ID decoded: %v", err)
	}
}

// TestHookedIndexAfterWatch: HookedIndex passes an index only once the Watch hook of its
// command has returned (AppliedIndex does as soon as the state has it), so a wait for
// "applied here" (raftmeta's WaitApplied) also waits for the hook's effects.
func TestHookedIndexAfterWatch(t *testing.T) {
	f := New()
	release, entered := make(chan struct{}), make(chan struct{})
	f.Watch(func(*Result) { close(entered); <-release })
	done := make(chan struct{})
	go func() { f.ApplyCommand(1, commit(1, ent("a", 1, 1))); close(done) }()
	<-entered
	if f.AppliedIndex() != 1 || f.HookedIndex() != 0 {
		t.Fatalf("inside the hook: applied %d, hooked %d; want 1 and 0", f.AppliedIndex(), f.HookedIndex())
	}
	close(release)
	<-done
	if f.HookedIndex() != 1 {
		t.Fatalf("after the hook: hooked %d, want 1", f.HookedIndex())
	}
}
