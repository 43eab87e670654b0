// Package fake is an in-memory kvoffload.Store for the tests of code that uses kvoffload: the
// semantics of the real store (per-key outcomes and codes, single-flight by key, exactly-once
// retries by TxnID, validation and limits, leases accepted) without a disk, a WAL or Raft.
// It passes the same conformance suite (storetest) as the embedded node and the remote client.
//
//	var s kvoffload.Store = fake.New(fake.Options{})
//
// Nothing is durable and nothing is ever Unknown, Unavailable or Corrupt unless the test says
// so with Fail.
package fake

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/kvoffload/kvoffload"
)

// Options are the fake's limits; zero fields take the real store's defaults.
type Options struct {
	MaxKeyBytes    int   // default 1024
	MaxObjectBytes int64 // default 64 MiB
	MaxBatchKeys   int   // default 4096
	MaxBatchBytes  int64 // default 1 GiB
	// CapacityBytes, when positive, is the most payload bytes held: an offload past it is
	// Rejected with CodeQuota (the fake never evicts).
	CapacityBytes int64
}

func (o Options) withDefaults() Options {
	if o.MaxKeyBytes == 0 {
		o.MaxKeyBytes = 1024
	}
	if o.MaxObjectBytes == 0 {
		o.MaxObjectBytes = 64 << 20
	}
	if o.MaxBatchKeys == 0 {
		o.MaxBatchKeys = 4096
	}
	if o.MaxBatchBytes == 0 {
		o.MaxBatchBytes = 1 << 30
	}
	return o
}

// Store is the in-memory store. It is safe for concurrent use.
type Store struct {
	opt Options

	mu     sync.Mutex
	closed bool
	data   map[string][]byte
	bytes  int64
	txns   map[kvoffload.TxnID]txnRecord
	fail   map[string]kvoffload.Code // keys that fail their next offload or read (Fail)
	counts map[string]uint64
}

// txnRecord is a finished transaction that stored keys: the bytes of each key it stored (as
// the real store's FSM records them), to tell a retry from another batch under the same ID.
type txnRecord struct {
	stored map[string]string
}

var _ kvoffload.Store = (*Store)(nil)

// New returns an empty store.
func New(opt Options) *Store {
	return &Store{opt: opt.withDefaults(), data: map[string][]byte{}, txns: map[kvoffload.TxnID]txnRecord{},
		fail: map[string]kvoffload.Code{}, counts: map[string]uint64{}}
}

// Fail makes the next offload of key Failed, or its next read Unavailable or Corrupt, with
// code (CodeIO, CodeUnavailable, CodeCorrupt, ...): a fault for the code under test to meet.
// A Corrupt read drops the key, as the real store does.
func (s *Store) Fail(key string, code kvoffload.Code) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.fail[key] = code
}

// Close makes every later call fail with kvoffload.ErrClosed.
func (s *Store) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	return nil
}

// begun refuses a call whose context has already ended (ErrUnavailable, wrapping it), as
// every Store does.
func begun(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("%w: %w", kvoffload.ErrUnavailable, err)
	}
	return nil
}

func (s *Store) usable() error {
	if s.closed {
		return kvoffload.ErrClosed
	}
	return nil
}

func (s *Store) checkKeys(keys []string) error {
	if len(keys) > s.opt.MaxBatchKeys {
		return fmt.Errorf("%w: batch of %d keys at key %q exceeds MaxBatchKeys %d", kvoffload.ErrTooLarge, len(keys), keys[s.opt.MaxBatchKeys], s.opt.MaxBatchKeys)
	}
	return nil
}

// BatchOffload implements kvoffload.Store.
func (s *Store) BatchOffload(ctx context.Context, id kvoffload.TxnID, objs []kvoffload.Object) ([]kvoffload.KeyResult, error) {
	if err := kvoffload.CheckTxnID(id); err != nil {
		return nil, err
	}
	if err := begun(ctx); err != nil {
		return nil, err
	}
	if len(objs) > s.opt.MaxBatchKeys {
		return nil, fmt.Errorf("%w: batch of %d keys at key %q exceeds MaxBatchKeys %d", kvoffload.ErrTooLarge, len(objs), objs[s.opt.MaxBatchKeys].Key, s.opt.MaxBatchKeys)
	}
	var total int64
	for _, o := range objs {
		if total += int64(len(o.Value)); total > s.opt.MaxBatchBytes {
			return nil, fmt.Errorf("%w: batch of %d bytes at key %q exceeds MaxBatchBytes %d", kvoffload.ErrTooLarge, total, o.Key, s.opt.MaxBatchBytes)
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.usable(); err != nil {
		return nil, err
	}
	if rec, ok := s.txns[id]; ok {
		return s.retried(id, rec, objs)
	}
	out := make([]kvoffload.KeyResult, len(objs))
	first := map[string]int{}
	stored := map[string]string{}
	for i, o := range objs {
		if out[i] = s.offloadOne(o, i, first, objs, out); out[i].Outcome == kvoffload.Stored {
			stored[o.Key] = string(o.Value)
		}
	}
	if len(stored) > 0 { // a transaction that stored nothing leaves no record, as on a node
		s.txns[id] = txnRecord{stored: stored}
		s.counts["txns"]++
	}
	return out, nil
}

// retried answers a call whose txn ID already stored keys, as the real store does
// (txn/join.go): a batch that lacks one of those keys, or holds one with other bytes, is
// another batch (ErrInvalidArgument); otherwise each key the transaction stored is Stored
// again, and each other key is answered as it stands now without being written.
func (s *Store) retried(id kvoffload.TxnID, rec txnRecord, objs []kvoffload.Object) ([]kvoffload.KeyResult, error) {
	seen := map[string]bool{}
	for _, o := range objs {
		if v, ok := rec.stored[o.Key]; ok {
			if v != string(o.Value) {
				return nil, fmt.Errorf("%w: txn %s wrote key %q with other bytes", kvoffload.ErrInvalidArgument, id, o.Key)
			}
			seen[o.Key] = true
		}
	}
	if len(seen) < len(rec.stored) {
		return nil, fmt.Errorf("%w: txn %s also wrote keys this batch lacks", kvoffload.ErrInvalidArgument, id)
	}
	out := make([]kvoffload.KeyResult, len(objs))
	first := map[string]int{}
	for i, o := range objs {
		r := kvoffload.KeyResult{Key: o.Key}
		switch _, mine := rec.stored[o.Key]; {
		case s.invalid(o, &r):
		case first[o.Key] > 0:
			if j := first[o.Key] - 1; string(objs[j].Value) != string(o.Value) {
				r.Outcome, r.Code, r.Reason = kvoffload.Conflict, kvoffload.CodeDuplicateKey, "the batch holds this key twice with different bytes"
			} else if r = out[j]; r.Outcome.OK() {
				r.Outcome = kvoffload.AlreadyStored
			}
		case mine:
			r.Outcome = kvoffload.Stored
		default:
			if v, ok := s.data[o.Key]; ok && v != nil && string(v) == string(o.Value) {
				r.Outcome = kvoffload.AlreadyStored
			} else if ok {
				r.Outcome, r.Code, r.Reason = kvoffload.Conflict, kvoffload.CodeMismatch, "committed with different bytes"
			} else {
				r.Outcome, r.Code, r.Reason = kvoffload.Failed, kvoffload.CodeTxnIDReused, "not written by the finished transaction with this ID; retry with a new txn ID"
			}
		}
		if first[o.Key] == 0 {
			first[o.Key] = i + 1
		}
		out[i] = r
	}
	return out, nil
}

// invalid answers o Rejected in r if the store can never take it, and reports whether it did.
func (s *Store) invalid(o kvoffload.Object, r *kvoffload.KeyResult) bool {
	code, why := kvoffload.CodeNone, kvoffload.CheckKey(o.Key)
	switch {
	case why != "":
		code = kvoffload.CodeInvalidKey
	case len(o.Key) > s.opt.MaxKeyBytes:
		code, why = kvoffload.CodeInvalidKey, fmt.Sprintf("invalid key: %d bytes exceeds the limit of %d", len(o.Key), s.opt.MaxKeyBytes)
	case len(o.Value) == 0:
		code, why = kvoffload.CodeInvalidValue, "invalid value: empty"
	case int64(len(o.Value)) > s.opt.MaxObjectBytes:
		code, why = kvoffload.CodeTooLarge, fmt.Sprintf("too large: %d bytes exceeds MaxObjectBytes %d", len(o.Value), s.opt.MaxObjectBytes)
	}
	if code == kvoffload.CodeNone {
		return false
	}
	r.Outcome, r.Code, r.Reason = kvoffload.Rejected, code, why
	return true
}

// offloadOne decides object i of a batch (first: the index of each key's first copy so far).
func (s *Store) offloadOne(o kvoffload.Object, i int, first map[string]int, objs []kvoffload.Object, out []kvoffload.KeyResult) kvoffload.KeyResult {
	r := kvoffload.KeyResult{Key: o.Key}
	reject := func(code kvoffload.Code, why string) kvoffload.KeyResult {
		r.Outcome, r.Code, r.Reason = kvoffload.Rejected, code, why
		s.counts["rejected"]++
		return r
	}
	if s.invalid(o, &r) {
		s.counts["rejected"]++
		return r
	}
	if j, ok := first[o.Key]; ok {
		if string(objs[j].Value) != string(o.Value) {
			r.Outcome, r.Code, r.Reason = kvoffload.Conflict, kvoffload.CodeDuplicateKey, "the batch holds this key twice with different bytes"
			return r
		}
		r = out[j]
		if r.Outcome.OK() {
			r.Outcome = kvoffload.AlreadyStored
		}
		return r
	}
	first[o.Key] = i
	if v, ok := s.data[o.Key]; ok {
		if string(v) == string(o.Value) {
			r.Outcome = kvoffload.AlreadyStored
			s.counts["already_stored"]++
		} else {
			r.Outcome, r.Code, r.Reason = kvoffload.Conflict, kvoffload.CodeMismatch, "committed with different bytes"
			s.counts["conflicts"]++
		}
		return r
	}
	if code, ok := s.fail[o.Key]; ok {
		delete(s.fail, o.Key)
		r.Outcome, r.Code, r.Reason = kvoffload.Failed, code, "injected by fake.Store.Fail"
		s.counts["failed"]++
		return r
	}
	if c := s.opt.CapacityBytes; c > 0 && s.bytes+int64(len(o.Value)) > c {
		return reject(kvoffload.CodeQuota, fmt.Sprintf("quota: %d more bytes would exceed CapacityBytes %d (%d held)", len(o.Value), c, s.bytes))
	}
	s.data[o.Key] = append([]byte(nil), o.Value...)
	s.bytes += int64(len(o.Value))
	r.Outcome = kvoffload.Stored
	s.counts["stored"]++
	return r
}

// BatchGet implements kvoffload.Store.
func (s *Store) BatchGet(ctx context.Context, keys []string) ([]kvoffload.GetResult, error) {
	return s.get(ctx, keys, nil)
}

// BatchGetInto implements kvoffload.Store.
func (s *Store) BatchGetInto(ctx context.Context, keys []string, bufs [][]byte) ([]kvoffload.GetResult, error) {
	if len(bufs) != len(keys) {
		return nil, fmt.Errorf("%w: %d buffers for %d keys", kvoffload.ErrInvalidArgument, len(bufs), len(keys))
	}
	return s.get(ctx, keys, bufs)
}

func (s *Store) get(ctx context.Context, keys []string, bufs [][]byte) ([]kvoffload.GetResult, error) {
	if err := s.checkKeys(keys); err != nil {
		return nil, err
	}
	if err := begun(ctx); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.usable(); err != nil {
		return nil, err
	}
	out := make([]kvoffload.GetResult, len(keys))
	for i, k := range keys {
		out[i] = s.getOne(k, bufs, i)
	}
	s.counts["gets"] += uint64(len(keys))
	return out, nil
}

func (s *Store) getOne(k string, bufs [][]byte, i int) kvoffload.GetResult {
	if why := kvoffload.CheckKey(k); why != "" {
		return kvoffload.GetResult{Key: k, Status: kvoffload.InvalidKey, Code: kvoffload.InvalidKey.Code(), Reason: why}
	}
	v, ok := s.data[k]
	if !ok {
		return kvoffload.GetResult{Key: k, Status: kvoffload.NotFound, Code: kvoffload.NotFound.Code()}
	}
	if code, ok := s.fail[k]; ok {
		delete(s.fail, k)
		if code == kvoffload.CodeCorrupt {
			s.drop(k)
			s.counts["get_corrupt"]++
			return kvoffload.GetResult{Key: k, Status: kvoffload.Corrupt, Code: code, Reason: "injected by fake.Store.Fail; the key was dropped"}
		}
		return kvoffload.GetResult{Key: k, Status: kvoffload.Unavailable, Code: code, Reason: "injected by fake.Store.Fail"}
	}
	r := kvoffload.GetResult{Key: k, Status: kvoffload.Found, Size: len(v)}
	switch {
	case bufs == nil:
		r.Value = append([]byte(nil), v...)
	case len(bufs[i]) < len(v):
		r.Status, r.Code = kvoffload.ShortBuffer, kvoffload.ShortBuffer.Code()
		r.Reason = fmt.Sprintf("buffer of %d bytes for a value of %d bytes", len(bufs[i]), len(v))
	default:
		r.Value = bufs[i][:copy(bufs[i], v)]
	}
	return r
}

func (s *Store) drop(k string) {
	s.bytes -= int64(len(s.data[k]))
	delete(s.data, k)
}

// BatchExists implements kvoffload.Store. Leases are accepted and have no effect: the fake
// never evicts.
func (s *Store) BatchExists(ctx context.Context, keys []string, lease time.Duration) (kvoffload.ExistsResult, error) {
	if err := s.checkKeys(keys); err != nil {
		return kvoffload.ExistsResult{}, err
	}
	if err := begun(ctx); err != nil {
		return kvoffload.ExistsResult{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.usable(); err != nil {
		return kvoffload.ExistsResult{}, err
	}
	res := kvoffload.ExistsResult{Keys: make([]kvoffload.Presence, len(keys))}
	for i, k := range keys {
		res.Keys[i] = kvoffload.Absent
		if _, ok := s.data[k]; ok {
			res.Keys[i] = kvoffload.Present
		}
	}
	res.PrefixPresent = kvoffload.LeadingPresent(res.Keys)
	return res, nil
}

// Remove implements kvoffload.Store.
func (s *Store) Remove(ctx context.Context, keys []string) ([]kvoffload.RemoveResult, error) {
	if err := s.checkKeys(keys); err != nil {
		return nil, err
	}
	if err := begun(ctx); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.usable(); err != nil {
		return nil, err
	}
	out := make([]kvoffload.RemoveResult, len(keys))
	removed := map[string]bool{} // a key named twice is removed once and reported removed twice, as on a node
	for i, k := range keys {
		if _, ok := s.data[k]; ok {
			s.drop(k)
			s.counts["removed"]++
			removed[k] = true
		}
		out[i] = kvoffload.RemoveResult{Key: k, Removed: removed[k]}
	}
	return out, nil
}

// Stats implements kvoffload.Store: the fake is one node, "fake", holding every key.
func (s *Store) Stats(ctx context.Context) (kvoffload.Stats, error) {
	if err := begun(ctx); err != nil {
		return kvoffload.Stats{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.usable(); err != nil {
		return kvoffload.Stats{}, err
	}
	counters := make(map[string]uint64, len(s.counts))
	for k, v := range s.counts {
		counters[k] = v
	}
	n := uint64(len(s.data))
	return kvoffload.Stats{NodeID: "fake", Keys: n, Bytes: uint64(s.bytes), LocalKeys: n, LocalBytes: uint64(s.bytes),
		LiveBytes: s.bytes, AllocatedBytes: s.bytes, Counters: counters}, nil
}
