package raftmeta

import (
	"bytes"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	upstream "github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"

	"github.com/kvoffload/kvoffload/third_party/raft"
)

func openBoltLogs(t *testing.T) boltLogs {
	t.Helper()
	s, err := raftboltdb.New(raftboltdb.Options{Path: filepath.Join(t.TempDir(), "raft.db")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return boltLogs{s, &logFault{}}
}

// testLog has every field of raft.Log set, each to a value that differs by index.
func testLog(i uint64) *raft.Log {
	return &raft.Log{
		Index:      i,
		Term:       10 + i,
		Type:       raft.LogConfiguration,
		Data:       []byte{'d', byte(i)},
		Extensions: []byte{'e', byte(i), 0},
		AppendedAt: time.Date(2025, 3, 4, 5, 6, 7, int(i)*1001, time.UTC),
	}
}

func sameLog(a, b *raft.Log) bool {
	return a.Index == b.Index && a.Term == b.Term && a.Type == b.Type &&
		bytes.Equal(a.Data, b.Data) && bytes.Equal(a.Extensions, b.Extensions) &&
		a.AppendedAt.Equal(b.AppendedAt)
}

func wantBounds(t *testing.T, s boltLogs, first, last uint64) {
	t.Helper()
	f, err := s.FirstIndex()
	if err != nil {
		t.Fatal(err)
	}
	l, err := s.LastIndex()
	if err != nil {
		t.Fatal(err)
	}
	if f != first || l != last {
		t.Fatalf("FirstIndex, LastIndex = %d, %d, want %d, %d", f, l, first, last)
	}
}

// wantMissing checks that GetLog of index is the fork's ErrLogNotFound itself: the fork
// compares with == (third_party/raft/replication.go), so a wrapped or upstream error would
// make a leader fail instead of sending a snapshot.
func wantMissing(t *testing.T, s boltLogs, index uint64) {
	t.Helper()
	var l raft.Log
	if err := s.GetLog(index, &l); err != raft.ErrLogNotFound {
		t.Fatalf("GetLog(%d) = %v, want the fork's raft.ErrLogNotFound", index, err)
	}
}

func TestBoltLogsRoundTrip(t *testing.T) {
	s := openBoltLogs(t)
	wantBounds(t, s, 0, 0)
	wantMissing(t, s, 1)
	if err := s.StoreLog(testLog(1)); err != nil {
		t.Fatal(err)
	}
	if err := s.StoreLogs([]*raft.Log{testLog(2), testLog(3), testLog(4), testLog(5)}); err != nil {
		t.Fatal(err)
	}
	wantBounds(t, s, 1, 5)
	for i := uint64(1); i <= 5; i++ {
		var got raft.Log
		if err := s.GetLog(i, &got); err != nil {
			t.Fatal(err)
		}
		if want := testLog(i); !sameLog(&got, want) {
			t.Fatalf("GetLog(%d) = %+v, want %+v", i, got, *want)
		}
	}
	wantMissing(t, s, 6)

	if err := s.DeleteRange(1, 2); err != nil {
		t.Fatal(err)
	}
	wantBounds(t, s, 3, 5)
	wantMissing(t, s, 2)
	if err := s.DeleteRange(5, 9); err != nil {
		t.Fatal(err)
	}
	wantBounds(t, s, 3, 4)
	wantMissing(t, s, 5)
}

// TestBoltLogsBehindLogCache reads through raft.NewLogCache as Node does: a miss in the
// cache reaches the store, and its ErrLogNotFound must still be the fork's.
func TestBoltLogsBehindLogCache(t *testing.T) {
	c, err := raft.NewLogCache(2, openBoltLogs(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := c.StoreLogs([]*raft.Log{testLog(1), testLog(2), testLog(3)}); err != nil {
		t.Fatal(err)
	}
	var got raft.Log
	if err := c.GetLog(1, &got); err != nil || !sameLog(&got, testLog(1)) {
		t.Fatalf("GetLog(1) = %+v, %v", got, err)
	}
	if err := c.GetLog(7, &got); err != raft.ErrLogNotFound {
		t.Fatalf("GetLog(7) = %v, want the fork's raft.ErrLogNotFound", err)
	}
}

// TestBoltStableStoreMissingKey: the fork tells a missing term or vote from a failing
// store by the message "not found" (third_party/raft/api.go, raft.go), which is
// raftboltdb.ErrKeyNotFound's; BoltStore is passed to the fork as its StableStore as is.
func TestBoltStableStoreMissingKey(t *testing.T) {
	s := openBoltLogs(t).s
	if _, err := s.GetUint64([]byte("CurrentTerm")); err == nil || err.Error() != "not found" {
		t.Fatalf("GetUint64 of a missing key = %v, want an error saying \"not found\"", err)
	}
	if _, err := s.Get([]byte("LastVoteCand")); err == nil || err.Error() != "not found" {
		t.Fatalf("Get of a missing key = %v, want an error saying \"not found\"", err)
	}
}

// TestLogStructsMatch guards toUpstream and fromUpstream: the fork's raft.Log and
// upstream's must have the same fields, in order, of the same types, and LogType the
// same values, or the copy would drop or mistranslate one.
func TestLogStructsMatch(t *testing.T) {
	fork, up := reflect.TypeFor[raft.Log](), reflect.TypeFor[upstream.Log]()
	if fork.NumField() != up.NumField() {
		t.Fatalf("raft.Log has %d fields, upstream's %d", fork.NumField(), up.NumField())
	}
	for i := range fork.NumField() {
		f, u := fork.Field(i), up.Field(i)
		same := f.Type == u.Type // uint64, []byte, time.Time
		if f.Type.PkgPath() == fork.PkgPath() && u.Type.PkgPath() == up.PkgPath() {
			same = f.Type.Name() == u.Type.Name() && f.Type.Kind() == u.Type.Kind() // LogType
		}
		if f.Name != u.Name || !same {
			t.Errorf("field %d: fork %s %s, upstream %s %s", i, f.Name, f.Type, u.Name, u.Type)
		}
	}
	pairs := []struct {
		name     string
		fork, up uint8
	}{
		{"LogCommand", uint8(raft.LogCommand), uint8(upstream.LogCommand)},
		{"LogNoop", uint8(raft.LogNoop), uint8(upstream.LogNoop)},
		{"LogAddPeerDeprecated", uint8(raft.LogAddPeerDeprecated), uint8(upstream.LogAddPeerDeprecated)},
		{"LogRemovePeerDeprecated", uint8(raft.LogRemovePeerDeprecated), uint8(upstream.LogRemovePeerDeprecated)},
		{"LogBarrier", uint8(raft.LogBarrier), uint8(upstream.LogBarrier)},
		{"LogConfiguration", uint8(raft.LogConfiguration), uint8(upstream.LogConfiguration)},
	}
	for _, p := range pairs {
		if p.fork != p.up {
			t.Errorf("%s: fork %d, upstream %d", p.name, p.fork, p.up)
		}
	}
}
