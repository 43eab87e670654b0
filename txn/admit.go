package txn

import (
	"encoding/binary"
	"fmt"
	"unicode/utf8"

	"github.com/cespare/xxhash/v2"

	"github.com/kvoffload/kvoffload"
	"github.com/kvoffload/kvoffload/fsm"
)

// The admission of one BatchOffload call, in call order: the request limits (checkBatch);
// each value's checksum, the batch's signature, each object's validity and first copy
// (admit); and, under the in-flight table's lock, what the metadata holds for each key
// (lookUp). Both answers that follow read what admission found, and neither asks the
// metadata again: the answer to a retry of a finished txn ID (retried, retry.go) and the
// plan of a new transaction (plan, plan.go).

// batch is one call's objects as admission found them.
type batch struct {
	objs []kvoffload.Object
	sums []uint64 // xxhash64 of each value: the signature's and each record's PayloadSum
	sig  uint64   // signature of the batch (signature)
	keys []admitted
}

// admitted is what admission found for one object.
type admitted struct {
	// The answer admission gives the object by itself (Rejected: invalid; Conflict: a repeat
	// of its key with other bytes), or the zero verdict when the object goes on.
	v     verdict
	first int // index of the first valid copy of the key; the object's own index if it is one

	// What the metadata holds for a valid first copy (lookUp): the live entry, or the last
	// generation the key used (live false).
	entry fsm.Entry
	live  bool
	gen   uint64
}

// answered reports whether admission answered the object by itself.
func (k *admitted) answered() bool { return k.v.outcome != 0 }

// valid reports whether object i is a valid first copy of its key: the one that is
// offloaded; the others are refused or repeat it.
func (b *batch) valid(i int) bool { return !b.keys[i].answered() && b.keys[i].first == i }

// size returns the length of object i's value in bytes.
func (b *batch) size(i int) uint32 { return uint32(len(b.objs[i].Value)) }

// checkBatch enforces the per-request limits: MaxBatchKeys, MaxBatchKeyBytes, MaxBatchBytes.
func (c *Coordinator) checkBatch(objs []kvoffload.Object) error {
	if len(objs) > c.cfg.MaxBatchKeys {
		return BatchKeysError(uint64(len(objs)), objs[c.cfg.MaxBatchKeys].Key, c.cfg.MaxBatchKeys)
	}
	var keyBytes, total int64
	overKeys, over := -1, -1 // the objects at which the key bytes and the total first went over
	for i, o := range objs {
		if keyBytes += int64(len(o.Key)); keyBytes > c.cfg.MaxBatchKeyBytes() && overKeys < 0 {
			overKeys = i
		}
		if total += int64(len(o.Value)); total > c.cfg.MaxBatchBytes && over < 0 {
			over = i
		}
	}
	if overKeys >= 0 {
		return BatchKeyBytesError(uint64(keyBytes), objs[overKeys].Key, c.cfg.MaxBatchKeyBytes())
	}
	if over >= 0 {
		return BatchBytesError(uint64(total), objs[over].Key, c.cfg.MaxBatchBytes)
	}
	return nil
}

// admit checksums objs, signs the batch, and finds each object's validity and first copy.
// An invalid object is Rejected; a repeat of a key with other bytes than its first valid
// copy is a Conflict; a repeat with the same bytes goes on as a repeat of the first copy.
func (c *Coordinator) admit(objs []kvoffload.Object) *batch {
	sums := checksums(objs)
	b := &batch{objs: objs, sums: sums, sig: signature(objs, sums), keys: make([]admitted, len(objs))}
	first := make(map[string]int, len(objs))
	for i, o := range objs {
		k := &b.keys[i]
		k.first = i
		if code, reason := c.invalid(o); code != kvoffload.CodeNone {
			k.v = rejected(code, reason)
			continue
		}
		j, repeat := first[o.Key]
		if !repeat {
			first[o.Key] = i
			continue
		}
		k.first = j
		if !b.sameBytes(i, j) {
			k.v = verdict{kvoffload.Conflict, kvoffload.CodeDuplicateKey, dupConflict}
		}
	}
	return b
}

// checksums returns the xxhash64 of every value: computed once per call, it is both the
// batch's signature and each record's PayloadSum.
func checksums(objs []kvoffload.Object) []uint64 {
	sums := make([]uint64, len(objs))
	for i, o := range objs {
		sums[i] = xxhash.Sum64(o.Value)
	}
	return sums
}

// signature identifies a batch by its keys, value lengths and value checksums, so a call that
// reuses a running call's txn ID for a different batch is refused instead of being handed its
// results.
func signature(objs []kvoffload.Object, sums []uint64) uint64 {
	d := xxhash.New()
	var n [8]byte
	put := func(v uint64) {
		binary.LittleEndian.PutUint64(n[:], v)
		_, _ = d.Write(n[:])
	}
	for i, o := range objs {
		put(uint64(len(o.Key))) // length-prefixed: no two key lists hash the same bytes
		_, _ = d.WriteString(o.Key)
		put(uint64(len(o.Value)))
		put(sums[i])
	}
	return d.Sum64()
}

// invalid returns why o is refused (its code and reason), or CodeNone.
func (c *Coordinator) invalid(o kvoffload.Object) (kvoffload.Code, string) {
	if why := c.invalidKey(o.Key); why != "" {
		return kvoffload.CodeInvalidKey, why
	}
	switch {
	case len(o.Value) == 0:
		return kvoffload.CodeInvalidValue, "invalid value: empty"
	case int64(len(o.Value)) > c.cfg.MaxObjectBytes:
		return kvoffload.CodeTooLarge, ObjectTooLarge(uint64(len(o.Value)), c.cfg.MaxObjectBytes)
	}
	return kvoffload.CodeNone, ""
}

// invalidKey returns why key can never be stored, or "".
func (c *Coordinator) invalidKey(key string) string {
	switch {
	case key == "":
		return "invalid key: empty"
	case len(key) > c.cfg.MaxKeyBytes:
		return fmt.Sprintf("invalid key: %d bytes exceeds the limit of %d", len(key), c.cfg.MaxKeyBytes)
	case !utf8.ValidString(key):
		return "invalid key: not valid UTF-8"
	}
	for i, r := range key {
		if r < 0x20 || r == 0x7f {
			return fmt.Sprintf("invalid key: control character at byte %d", i)
		}
	}
	return ""
}

// lookUp reads, once per valid first copy, what the metadata holds for its key: the live
// entry, or the last generation used. The caller holds c.inflight.mu, so that with the
// in-flight table this decides whether each key is committed, in flight, or free.
func (c *Coordinator) lookUp(b *batch) {
	if m, ok := c.meta.(eachLookup); ok {
		m.LookupEach(len(b.objs), func(i int) string { return b.objs[i].Key }, func(i int, e fsm.Entry, live bool, gen uint64) {
			if b.valid(i) {
				b.keys[i].entry, b.keys[i].live = e, live
				if !live {
					b.keys[i].gen = gen
				}
			}
		})
		return
	}
	for i, o := range b.objs {
		if !b.valid(i) {
			continue
		}
		k := &b.keys[i]
		if k.entry, k.live = c.meta.Lookup(o.Key); !k.live {
			k.gen = c.meta.Generation(o.Key)
		}
	}
}

// dupConflict is the reason of a key repeated in a batch with other bytes than its first copy.
const dupConflict = "the batch holds this key twice with different bytes"

// sameBytes reports whether objects i and j hold the same value (length and checksum).
func (b *batch) sameBytes(i, j int) bool {
	return b.sums[i] == b.sums[j] && len(b.objs[i].Value) == len(b.objs[j].Value)
}
