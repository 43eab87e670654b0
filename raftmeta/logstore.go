package raftmeta

import (
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"syscall"

	upstream "github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"

	"github.com/kvoffload/kvoffload/third_party/raft"
)

// boltLogs is raft-boltdb's BoltStore as a log store of the patched Raft in third_party/raft.
//
// raft-boltdb imports upstream github.com/hashicorp/raft, so its GetLog and StoreLogs take
// upstream's raft.Log: the same fields as the fork's (third_party/raft/log.go) but another
// type, and its missing-entry error is upstream's ErrLogNotFound, another variable than the
// fork's. The fork tells a log that no longer holds an entry from a failing store by that
// variable (replication.go sends a snapshot on `err == ErrLogNotFound`), so every log
// entry is copied field by field and the sentinel is mapped on the way back. This is the
// only place where upstream Raft types meet the fork (third_party/raft/KVOFFLOAD.md).
//
// BoltStore is the fork's StableStore as it is (wrapped in faultStable, which records its
// write errors): that interface uses only []byte and uint64, and the fork recognizes a
// missing key by its message "not found", which raftboltdb.ErrKeyNotFound has.
type boltLogs struct {
	s     *raftboltdb.BoltStore
	fault *logFault
}

var (
	_ raft.LogStore    = boltLogs{}
	_ raft.StableStore = (*raftboltdb.BoltStore)(nil) // wrapped in faultStable
)

// logFault keeps the first error writing raft.db and calls onFault with it once. Every such
// error is fatal to the member: bolt does not retry, and Raft cannot go on without its log.
type logFault struct {
	err     atomic.Pointer[error]
	onFault func(error)
}

// record returns err, after recording it (wrapped in ErrLogWrite, with a hint when the
// filesystem is full) if it is the first.
func (f *logFault) record(err error) error {
	if err == nil {
		return nil
	}
	what := fmt.Errorf("%w: %w", ErrLogWrite, err)
	if errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT) || strings.Contains(err.Error(), "no space left on device") {
		what = fmt.Errorf("%w: the data filesystem is full (free space on it, then restart): %w", ErrLogWrite, err)
	}
	if f.err.CompareAndSwap(nil, &what) && f.onFault != nil {
		go f.onFault(what)
	}
	return err
}

// get returns the recorded error, or nil.
func (f *logFault) get() error {
	if p := f.err.Load(); p != nil {
		return *p
	}
	return nil
}

func (b boltLogs) FirstIndex() (uint64, error) { return b.s.FirstIndex() }

func (b boltLogs) LastIndex() (uint64, error) { return b.s.LastIndex() }

// GetLog reads the entry at index into l. An index the store does not hold is the fork's
// raft.ErrLogNotFound.
func (b boltLogs) GetLog(index uint64, l *raft.Log) error {
	var u upstream.Log
	if err := b.s.GetLog(index, &u); err != nil {
		if errors.Is(err, upstream.ErrLogNotFound) {
			return raft.ErrLogNotFound
		}
		return err
	}
	*l = fromUpstream(&u)
	return nil
}

func (b boltLogs) StoreLog(l *raft.Log) error { return b.StoreLogs([]*raft.Log{l}) }

// StoreLogs writes logs in one bolt transaction, as BoltStore does.
func (b boltLogs) StoreLogs(logs []*raft.Log) error {
	us := make([]upstream.Log, len(logs))
	ptrs := make([]*upstream.Log, len(logs))
	for i, l := range logs {
		us[i] = toUpstream(l)
		ptrs[i] = &us[i]
	}
	return b.fault.record(b.s.StoreLogs(ptrs))
}

func (b boltLogs) DeleteRange(lo, hi uint64) error { return b.fault.record(b.s.DeleteRange(lo, hi)) }

// toUpstream and fromUpstream copy every field of raft.Log; TestLogStructsMatch fails when
// either release adds, removes or changes one. The slices are shared, not copied: the
// store encodes them at once, and a read returns fresh ones.
func toUpstream(l *raft.Log) upstream.Log {
	return upstream.Log{
		Index:      l.Index,
		Term:       l.Term,
		Type:       upstream.LogType(l.Type),
		Data:       l.Data,
		Extensions: l.Extensions,
		AppendedAt: l.AppendedAt,
	}
}

func fromUpstream(u *upstream.Log) raft.Log {
	return raft.Log{
		Index:      u.Index,
		Term:       u.Term,
		Type:       raft.LogType(u.Type),
		Data:       u.Data,
		Extensions: u.Extensions,
		AppendedAt: u.AppendedAt,
	}
}
