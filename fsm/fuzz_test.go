package fsm

import (
	"bytes"
	"reflect"
	"testing"
)

func encodeAny(t CommandType, v any) []byte {
	switch t {
	case CmdCommit:
		return EncodeCommit(v.(Commit))
	case CmdAbort:
		return EncodeAbort(v.(Abort))
	case CmdRemove:
		return EncodeRemove(v.(Remove))
	case CmdMember:
		return EncodeSetMember(v.(SetMember))
	case CmdPrune:
		return EncodePrune(v.(Prune))
	case CmdCluster:
		return EncodeSetCluster(v.(SetCluster))
	}
	panic("unreachable")
}

// FuzzDecode: Decode never panics; whatever it accepts re-encodes to bytes
// that decode to the same value, and applies without panicking.
func FuzzDecode(f *testing.F) {
	f.Add(commit(1, ent("a", 1, 1), ent("b", 2, 3)))
	f.Add(abort(2))
	f.Add(remove(3, KeyGen{Key: "a", Gen: 1}, KeyGen{Key: "b"}))
	f.Add(setMember(4, "n1", "10.0.0.1:7000", "10.0.0.1:8000"))
	f.Add(delMember(5, "n2"))
	f.Add(EncodeSetCluster(SetCluster{TxnID: id(6), ID: "c-0123"}))
	f.Add([]byte{byte(CmdMember), 1})
	f.Add([]byte{})
	f.Add([]byte{byte(CmdCommit), 1, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, data []byte) {
		typ, v, err := Decode(data)
		if err != nil {
			return
		}
		enc := encodeAny(typ, v)
		typ2, v2, err := Decode(enc)
		if err != nil || typ2 != typ || !reflect.DeepEqual(v, v2) {
			t.Fatalf("round trip: %v %v %+v, want %v %+v", err, typ2, v2, typ, v)
		}
		if !bytes.Equal(encodeAny(typ2, v2), enc) {
			t.Fatal("encoding is not deterministic")
		}
		fsm := New()
		fsm.ApplyCommand(1, data)
		mustCheck(t, fsm)
	})
}

// FuzzRestore: Restore never panics and either fails or yields a state that
// passes its invariant checks and re-snapshots to the same Hash.
func FuzzRestore(f *testing.F) {
	src := New()
	src.ApplyCommand(1, commit(1, ent("a", 1, 1)))
	src.ApplyCommand(2, remove(2, KeyGen{Key: "b"}))
	src.ApplyCommand(3, abort(3))
	src.ApplyCommand(4, setMember(4, "n1", "r1", "a1"))
	src.ApplyCommand(5, setMember(5, "n2", "r2", "a2"))
	var buf bytes.Buffer
	if _, err := src.Snapshot().WriteTo(&buf); err != nil {
		f.Fatal(err)
	}
	f.Add(buf.Bytes())
	f.Add([]byte("KVFS\x01"))
	f.Add([]byte("KVFS\x02"))
	f.Fuzz(func(t *testing.T, data []byte) {
		g := New()
		if err := g.Restore(bytes.NewReader(data)); err != nil {
			return
		}
		mustCheck(t, g)
		var out bytes.Buffer
		if _, err := g.Snapshot().WriteTo(&out); err != nil {
			t.Fatal(err)
		}
		h := New()
		if err := h.Restore(&out); err != nil || h.Hash() != g.Hash() {
			t.Fatalf("re-snapshot: %v", err)
		}
	})
}
