package fsm

import (
	"encoding/json"
	"errors"
	"fmt"
)

// Result wire format: how a leader returns a forwarded proposal's Result to the node that
// proposed it (the Result field of the Cluster service's ProposeResponse). The constants are
// wire format.
//
//	magic   "KVRS" (4 bytes) | version byte (resultVersion)
//	txn [16]byte | type byte | index uvarint | aborted byte (0/1) |
//	n uvarint | n x (key str | outcome byte | shared byte (0/1) | fullEntry)
//
//	fullEntry: cmdEntry (see codec.go) | owner str | txn [16]byte
//
// type is the CommandType of the command that made the result, index the Raft index at which
// it was first applied, outcome an Outcome (types.go: 1 stored to 8 invalid), shared and the
// entry those of KeyOutcome (the entry is zero for stale, absent and invalid). It is the
// snapshot's result record (snapshot.go) with KeyOutcome.Shared added. There is no checksum:
// the bytes travel inside a gRPC message, as commands do. Encoding is deterministic.
// Decoding rejects a bad magic or version, a type or an outcome this binary does not know (a
// value a newer binary added is an error, not a misread), a bool byte other than 0 or 1, a
// count that cannot fit, a truncated field and trailing bytes, every error wrapping
// ErrBadResult, and never panics (FuzzDecodeResult). A result without key outcomes decodes
// with nil Keys, as ApplyCommand returns it. TestResultGolden holds the bytes to
// testdata/result-v1.golden.
//
// Binaries before this format sent the Result as encoding/json of the struct, which always
// begins with '{' (testdata/result-json.golden, result-member-json.golden). DecodeResult
// still reads that form, so a node of this binary accepts
// Results from a leader of the old one; the old binary cannot read this format, so a rolling
// upgrade replaces followers first and the leader last (docs/format.md).
const (
	resultMagic   = "KVRS"
	resultVersion = 1
)

// ErrBadResult: a Result failed its magic, version or structural checks. Every error of
// DecodeResult wraps it.
var ErrBadResult = errors.New("fsm: malformed result")

// minKeyOutcome is the least a key outcome takes: key, outcome, shared and a fullEntry with
// empty strings.
const minKeyOutcome = 1 + 1 + 1 + minCmdEntry + 1 + len(TxnID{})

// EncodeResult encodes r in the format above. Deterministic.
func EncodeResult(r *Result) []byte {
	e := encoder{buf: make([]byte, 0, 32+len(r.Keys)*96)}
	e.buf = append(e.buf, resultMagic...)
	e.byte1(resultVersion)
	e.result(r, true)
	return e.buf
}

// result writes a result record: the body of the format above (withShared), or a snapshot's
// result record, which has no shared byte.
func (e *encoder) result(r *Result, withShared bool) {
	e.resultOf(r, len(r.Keys), func(i int) KeyOutcome { return r.Keys[i] }, withShared)
}

// resultOf writes the result record of hdr (TxnID, Type, Index, Aborted) with n key outcomes
// given by ko: a snapshot writes its compact records (record.go) so, without expanding them.
func (e *encoder) resultOf(hdr *Result, n int, ko func(int) KeyOutcome, withShared bool) {
	e.txn(hdr.TxnID)
	e.byte1(byte(hdr.Type))
	e.uvarint(hdr.Index)
	e.bool1(hdr.Aborted)
	e.uvarint(uint64(n))
	for i := range n {
		ko := ko(i)
		e.str(ko.Key)
		e.byte1(byte(ko.Outcome))
		if withShared {
			e.bool1(ko.Shared)
		}
		e.fullEntry(ko.Entry)
	}
}

// resultRecord reads what result wrote. Keys is nil when there are none.
func (d *decoder) resultRecord(withShared bool) *Result {
	r := &Result{TxnID: d.txn("result txn")}
	r.Type = CommandType(d.byte1("result type"))
	r.Index = d.uvarint("result index")
	r.Aborted = d.bool1("result aborted")
	n, hint := d.count("result key count", minKeyOutcome-int(boolByte(!withShared)))
	if n > 0 {
		r.Keys = make([]KeyOutcome, 0, hint)
	}
	for i := 0; i < n && d.err == nil; i++ {
		ko := KeyOutcome{Key: d.str("outcome key")}
		ko.Outcome = Outcome(d.byte1("outcome"))
		if withShared {
			ko.Shared = d.bool1("outcome shared")
		}
		ko.Entry = d.fullEntryLike(ko.Key)
		r.Keys = append(r.Keys, ko)
	}
	return r
}

// DecodeResult parses a Result written by EncodeResult, or the JSON form of binaries before
// it (first byte '{'). A Result without keys has nil Keys, as ApplyCommand returns it,
// whichever form it came in. DecodeResult
// never panics and allocates no more than a small multiple of len(data); every error wraps
// ErrBadResult.
func DecodeResult(data []byte) (*Result, error) {
	var r *Result
	if len(data) > 0 && data[0] == '{' {
		r = new(Result)
		if err := json.Unmarshal(data, r); err != nil {
			return nil, fmt.Errorf("%w: json: %w", ErrBadResult, err)
		}
	} else {
		var err error
		if r, err = decodeBinaryResult(data); err != nil {
			return nil, err
		}
	}
	if len(r.Keys) == 0 {
		r.Keys = nil
	}
	if err := r.checkRange(); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBadResult, err)
	}
	return r, nil
}

func decodeBinaryResult(data []byte) (*Result, error) {
	hdr := len(resultMagic) + 1
	if len(data) < hdr || string(data[:len(resultMagic)]) != resultMagic {
		return nil, fmt.Errorf("%w: header %q, want %q and a version", ErrBadResult, data[:min(len(data), hdr)], resultMagic)
	}
	if v := data[len(resultMagic)]; v != resultVersion {
		return nil, fmt.Errorf("%w: version %d, this binary reads version %d", ErrBadResult, v, resultVersion)
	}
	d := &decoder{mem: data[hdr:]}
	r := d.resultRecord(true)
	if d.err == nil && len(d.mem) != 0 {
		d.fail(fmt.Errorf("%d trailing bytes", len(d.mem)))
	}
	if d.err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBadResult, d.err)
	}
	return r, nil
}

// checkRange refuses a type or an outcome this binary does not know, so a value added by a
// newer binary is an error, not a misread.
func (r *Result) checkRange() error {
	if r.Type < CmdCommit || r.Type > CmdCluster {
		return fmt.Errorf("type %d", r.Type)
	}
	for _, ko := range r.Keys {
		if ko.Outcome < OutcomeStored || ko.Outcome > OutcomeInvalid {
			return fmt.Errorf("key %q: outcome %d", ko.Key, ko.Outcome)
		}
	}
	return nil
}
