package txn

import (
	"context"
	"errors"
	"sort"
	"sync"
	"time"

	"github.com/cespare/xxhash/v2"

	"github.com/kvoffload/kvoffload"
	"github.com/kvoffload/kvoffload/bucketstore"
	"github.com/kvoffload/kvoffload/fsm"
)

func xxhashOf(b []byte) uint64 { return xxhash.Sum64(b) }

// BatchGet reads keys and returns one result per key, in input order. Every returned value
// has been verified against its record header and the metadata (key, txn ID, generation,
// length, xxhash64). A record that fails verification twice (it is read again, alone, once)
// is reported Corrupt and its key is removed from the metadata, so later reads see NotFound
// rather than wrong bytes. Reads are
// issued in (bucket, offset) order. A key named more than once is read once, and every
// position gets the same answer (a Corrupt record is not reported NotFound at its second
// position because the first removed it) in bytes of its own.
func (c *Coordinator) BatchGet(ctx context.Context, keys []string) ([]kvoffload.GetResult, error) {
	return c.gather(ctx, keys, false, nil)
}

// gather is batchGetEach into fresh buffers, the results gathered in input order.
func (c *Coordinator) gather(ctx context.Context, keys []string, ownerSide bool, reserve func(int64) error) ([]kvoffload.GetResult, error) {
	out := make([]kvoffload.GetResult, len(keys))
	err := c.batchGetEach(ctx, keys, false, ownerSide, reserve, func(i int, r kvoffload.GetResult) bool {
		out[i] = r
		return true
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// BatchGetEach is BatchGet that hands each position's result to visit as soon as it is known
// (a value once it is verified) instead of gathering the batch, so that a caller copying the
// values elsewhere (a shared-memory region, its own buffers, a stream) overlaps that copy
// with the reads still in flight. visit(i, r) is called once for each position i of keys, in
// no particular order, possibly from several goroutines at once (on the real filesystem from
// the one that submits the reads, so a visit that blocks holds up the reads not yet issued,
// and a visit must never wait for another); BatchGetEach returns after the last call. A Found r.Value is a recycled read buffer that visit borrows:
// it is valid until visit returns, or for good if visit returns true (keep). The positions
// of a repeated key are visited one after another with the same bytes, so kept bytes must
// not be written to. Errors (those of BatchGet: ErrTooLarge for MaxBatchKeys and
// MaxBatchBytes, the coordinator's failure) come before any visit.
//
// reserve, when not nil, is called once before the first read with the bytes the values to
// be read hold in memory (each distinct key's size once: positions share their bytes), from
// the same metadata lookup the reads use, so that a caller can account for them in a budget
// (and wait for it) before they exist; its error is returned, before any visit.
func (c *Coordinator) BatchGetEach(ctx context.Context, keys []string, reserve func(bytes int64) error, visit func(i int, r kvoffload.GetResult) (keep bool)) error {
	return c.batchGetEach(ctx, keys, true, false, reserve, visit)
}

// batchGetEach is BatchGetEach reading into recycled buffers when pooled, else into fresh
// ones (and then every position after a repeated key's first gets a copy). ownerSide: only
// the keys whose bytes this node holds are read (BatchGetLocal).
func (c *Coordinator) batchGetEach(ctx context.Context, keys []string, pooled, ownerSide bool, reserve func(int64) error, visit func(int, kvoffload.GetResult) bool) error {
	if err := c.Usable(); err != nil {
		return err
	}
	if len(keys) > c.cfg.MaxBatchKeys {
		return BatchKeysError(uint64(len(keys)), keys[c.cfg.MaxBatchKeys], c.cfg.MaxBatchKeys)
	}
	uniq, pos := collapse(keys)
	times := make([]int64, len(uniq)) // positions per distinct key: MaxBatchBytes counts each
	for _, p := range pos {
		times[p]++
	}
	var at [][]int // at[u]: the positions of uniq[u], when some key repeats
	if len(uniq) < len(keys) {
		at = make([][]int, len(uniq))
		for i, p := range pos {
			at[p] = append(at[p], i)
		}
	}
	deliver := func(u int, r kvoffload.GetResult, release func()) {
		fillGetCode(&r)
		keep := false
		if at == nil {
			keep = visit(u, r)
		} else {
			for j, i := range at[u] {
				v := r
				if j > 0 && !pooled && v.Value != nil { // every position owns its bytes
					v.Value = append([]byte(nil), v.Value...)
				}
				keep = visit(i, v) || keep
			}
		}
		if release != nil && !keep {
			release()
		}
	}
	if err := c.batchGet(ctx, uniq, times, pooled, ownerSide, reserve, deliver); err != nil {
		return err
	}
	c.stats.gets.Add(uint64(len(keys)))
	return nil
}

// collapse returns keys without repeats, in first-seen order, and for each input position
// the index of its key in that list.
func collapse(keys []string) (uniq []string, pos []int) {
	seen := make(map[string]int, len(keys))
	pos = make([]int, len(keys))
	for i, k := range keys {
		p, ok := seen[k]
		if !ok {
			p = len(uniq)
			seen[k] = p
			uniq = append(uniq, k)
		}
		pos[i] = p
	}
	return uniq, pos
}

// deliverFunc takes the result of keys[i] (release, when not nil, returns its recycled
// buffer).
type deliverFunc func(i int, r kvoffload.GetResult, release func())

// batchGet is batchGetEach for keys without repeats; keys[i] counts times[i] times against
// MaxBatchBytes and once in what reserve is given. Each key's result goes to deliver once;
// nothing is delivered when it returns an error.
//
// ownerSide is the owner's side of a read another member forwarded (BatchGetLocal): that
// member found each key in its metadata as this node's, and its metadata may be ahead of
// this node's, so a key absent here or here another node's is confirmed as a miss is (CI saw
// TestC3 read NotFound from an owner whose FSM had not yet applied a COMMIT the asking node
// had), within half the time the caller has left, so that the keys this node holds are
// answered before the asking member's deadline even with a slow leader. Keys that stay
// another node's are Unavailable before any limit or check applies to them (they are not
// read here, nor from another member).
func (c *Coordinator) batchGet(ctx context.Context, keys []string, times []int64, pooled, ownerSide bool, reserve func(int64) error, deliver deliverFunc) error {
	early := make([]kvoffload.GetResult, len(keys)) // results known before any read
	order := make([]int, len(keys))
	entries := make([]fsm.Entry, len(keys))
	var misses []int
	for i, k := range keys {
		early[i].Key, order[i] = k, i
		e, ok := c.meta.Lookup(k)
		if ok {
			entries[i] = e
		}
		if !ok || ownerSide && e.Owner != c.cfg.NodeID {
			misses = append(misses, i)
		}
	}
	cctx, cancel := ctx, context.CancelFunc(func() {})
	if dl, ok := ctx.Deadline(); ok && ownerSide {
		cctx, cancel = context.WithTimeout(ctx, time.Until(dl)/2)
	}
	err := c.confirmMisses(cctx, keys, misses, entries)
	cancel()
	if err != nil {
		for _, i := range misses {
			early[i].Status, early[i].Reason = kvoffload.Unavailable, "not in this node's metadata, which could not be brought up to date: "+err.Error()
		}
	}
	var total, held int64 // the values' bytes: per position (MaxBatchBytes), per key (reserve)
	over := ""            // the key at which total first exceeds MaxBatchBytes
	var bad []int
	for i := range keys {
		switch {
		case early[i].Status != 0:
		case entries[i].Key == "": // absent, and confirmed absent
			early[i].Status = kvoffload.NotFound
		case ownerSide && entries[i].Owner != c.cfg.NodeID: // never read here: neither counted nor checked
			early[i].Status, early[i].Reason = kvoffload.Unavailable, "not owned by node "+c.cfg.NodeID
		case fsm.CheckEntry(entries[i]) != nil:
			bad = append(bad, i) // answered below, once the batch is known to be within its limits
		default:
			held += int64(entries[i].Size)
			if total += int64(entries[i].Size) * times[i]; total > c.cfg.MaxBatchBytes && over == "" {
				over = keys[i]
			}
		}
	}
	if total > c.cfg.MaxBatchBytes {
		return BatchBytesError(uint64(total), over, c.cfg.MaxBatchBytes)
	}
	if reserve != nil {
		if err := reserve(held); err != nil {
			return err
		}
	}
	for _, i := range bad {
		// Refused before its Size counts against MaxBatchBytes or its Length is allocated,
		// whichever node owns it: a bad entry must not fail the batch or exhaust memory.
		early[i] = c.corruptEntry(ctx, keys[i], entries[i], fsm.CheckEntry(entries[i]))
	}
	sort.SliceStable(order, func(a, b int) bool { return extentLess(entries[order[a]].Extent, entries[order[b]].Extent) })
	remote := map[string][]int{} // owner -> indexes of keys it holds
	var local []int              // in extent order
	for _, i := range order {
		if early[i].Status != 0 {
			deliver(i, early[i], nil)
			continue
		}
		if owner := entries[i].Owner; owner != c.cfg.NodeID { // not on the owner's side: answered early
			remote[owner] = append(remote[owner], i)
			continue
		}
		local = append(local, i)
	}
	var wg sync.WaitGroup
	if len(remote) > 0 {
		wg.Add(1)
		go func() { defer wg.Done(); c.readRemote(ctx, keys, entries, remote, deliver) }()
	}
	c.readLocal(ctx, keys, entries, local, pooled, deliver)
	wg.Wait()
	return nil
}

// readLocal reads the records of keys[i] for i in idx (in extent order; entries that pass
// fsm.CheckEntry, which the callers check first) and delivers each
// as it is verified, with up to Config.ReadsInFlight reads in flight on the device
// (bucketstore.Store.ReadBatch), so the device sees a queue of nearby reads rather than one
// pread at a time. A read's extent is pinned from just before it is issued until it is
// verified, and the metadata is checked again after the pin: bytes are freed only after
// their removal is applied, so an entry still present after the pin cannot be freed under
// the reader. The keys found corrupt are removed in one proposal once the reads are over, so
// a repair waiting on Raft never holds up the batch's reads.
func (c *Coordinator) readLocal(ctx context.Context, keys []string, entries []fsm.Entry, idx []int, pooled bool, deliver deliverFunc) {
	depth := c.cfg.ReadsInFlight
	if depth <= 0 {
		depth = 32
	}
	var mu sync.Mutex
	var corrupt []fsm.KeyGen
	found := func(key string, e fsm.Entry) {
		mu.Lock()
		corrupt = append(corrupt, fsm.KeyGen{Key: key, Gen: e.Gen})
		mu.Unlock()
	}
	// The keys are used now: touched in the LRU once, before the reads, so that an eviction
	// while the batch runs takes other keys first (TestReadKeysNotEvictedDuringTheirBatch).
	// Touched per read as each is verified, a batch would take one lock per key; touched
	// after the batch, its keys would stay oldest until it ended.
	touched := make([]string, len(idx))
	for j, i := range idx {
		touched[j] = keys[i]
	}
	c.ev.lru.touchAll(touched)
	c.data.ReadBatch(len(idx), depth, pooled, func(j int) (bucketstore.Extent, bucketstore.Header, bool) {
		i := idx[j]
		key, e := keys[i], entries[i]
		if err := ctx.Err(); err != nil {
			deliver(i, kvoffload.GetResult{Key: key, Status: kvoffload.Unavailable, Code: kvoffload.CodeCanceled, Reason: err.Error()}, nil)
			return bucketstore.Extent{}, bucketstore.Header{}, false
		}
		c.reclaim.pin(e.Extent)
		if cur, ok := c.meta.Lookup(key); !ok || cur.TxnID != e.TxnID || cur.Gen != e.Gen {
			c.reclaim.unpin(e.Extent)
			deliver(i, kvoffload.GetResult{Key: key, Status: kvoffload.NotFound, Reason: "removed while reading"}, nil)
			return bucketstore.Extent{}, bucketstore.Header{}, false
		}
		return e.Extent, committedHeader(key, e), true
	}, func(j int, val []byte, release func(), err error) {
		i := idx[j]
		if errors.Is(err, bucketstore.ErrCorrupt) {
			// A record that fails verification once may be whole on the disk (a bit flipped
			// on its way to memory): it is read once more, alone, before its key is removed.
			val, err = c.data.Read(entries[i].Extent, committedHeader(keys[i], entries[i]))
			release = nil // a fresh slice, or an error
		}
		c.reclaim.unpin(entries[i].Extent)
		r := c.readResult(keys[i], entries[i], val, err)
		if r.Status == kvoffload.Corrupt {
			found(keys[i], entries[i])
		}
		deliver(i, r, release)
	})
	c.repair(ctx, corrupt)
}

// committedHeader is what the record of key's committed entry e must hold.
func committedHeader(key string, e fsm.Entry) bucketstore.Header {
	return bucketstore.Header{Key: key, TxnID: e.TxnID, Generation: e.Gen, PayloadLen: e.Size, PayloadSum: e.Sum}
}

// readResult answers a read of key's committed entry e that gave val or err: Found (the
// caller touched the key in the LRU before the read), Unavailable for an I/O error, or
// Corrupt for a record that fails verification (the caller removes the key from the
// metadata).
func (c *Coordinator) readResult(key string, e fsm.Entry, val []byte, err error) kvoffload.GetResult {
	if err == nil {
		return kvoffload.GetResult{Key: key, Status: kvoffload.Found, Value: val}
	}
	if !errors.Is(err, bucketstore.ErrCorrupt) {
		return kvoffload.GetResult{Key: key, Status: kvoffload.Unavailable, Reason: err.Error()}
	}
	c.stats.getCorrupt.Add(1)
	c.lg.Error("corrupt record; removing the key from metadata", "key", key, "extent", e.Extent, "err", err)
	return kvoffload.GetResult{Key: key, Status: kvoffload.Corrupt, Reason: err.Error()}
}

// confirmMisses makes a miss linearizable: if keys[i] for i in misses were absent from local
// metadata (or, on the owner's side of a read, another node's), it brings the metadata up to
// date with Meta.ReadIndex (a no-op on a single node), bounded by ReadIndexTimeout, and looks
// them up again, setting entries[i] to each one's entry, or to none. A key acknowledged
// through any node before the read began is then found. It returns ReadIndex's error,
// leaving entries unchanged.
func (c *Coordinator) confirmMisses(ctx context.Context, keys []string, misses []int, entries []fsm.Entry) error {
	if len(misses) == 0 {
		return nil
	}
	if err := c.CatchUp(ctx); err != nil {
		c.stats.readIndexFailed.Add(1)
		return err
	}
	for _, i := range misses {
		if e, ok := c.meta.Lookup(keys[i]); ok {
			entries[i] = e
		} else {
			entries[i] = fsm.Entry{} // gone meanwhile (it was here another node's): NotFound
		}
	}
	return nil
}

// readRemote delivers the keys whose bytes live on other nodes, one call per owner, in
// parallel. Without a Remote (single node) they are Unavailable.
func (c *Coordinator) readRemote(ctx context.Context, keys []string, entries []fsm.Entry, byOwner map[string][]int, deliver deliverFunc) {
	var wg sync.WaitGroup
	for owner, idx := range byOwner {
		if c.remote == nil {
			for _, i := range idx {
				deliver(i, kvoffload.GetResult{Key: keys[i], Status: kvoffload.Unavailable, Reason: "owned by node " + owner}, nil)
			}
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			ks := make([]string, len(idx))
			var size int64
			for j, i := range idx {
				ks[j] = keys[i]
				size += int64(entries[i].Size)
			}
			res := c.remote.ReadRemote(ctx, owner, ks, size)
			for j, i := range idx {
				if j >= len(res) {
					deliver(i, kvoffload.GetResult{Key: keys[i], Status: kvoffload.Unavailable, Reason: "owner " + owner + " returned too few results"}, nil)
					continue
				}
				r := res[j]
				// The owner verified the record; check the bytes against this node's metadata too,
				// so a stale owner or a damaged transfer never reaches the caller (G3).
				if e := entries[i]; r.Status == kvoffload.Found && (uint32(len(r.Value)) != e.Size || xxhashOf(r.Value) != e.Sum) {
					r = kvoffload.GetResult{Key: r.Key, Status: kvoffload.Unavailable, Reason: "owner " + owner + " returned bytes that do not match the metadata"}
				}
				deliver(i, r, nil)
			}
		}()
	}
	wg.Wait()
}

// BatchGetLocal reads only keys whose bytes this node owns (the owner side of a forwarded
// read), as BatchGet does otherwise: a repeated key is read once and counts at every position
// against MaxBatchBytes, reserve (when not nil) is given the bytes the values will hold
// before anything is read, and a miss is confirmed with the leader (batchGet's ownerSide).
// Keys the metadata assigns to another node are Unavailable.
func (c *Coordinator) BatchGetLocal(ctx context.Context, keys []string, reserve func(bytes int64) error) ([]kvoffload.GetResult, error) {
	return c.gather(ctx, keys, true, reserve)
}

// extentLess orders extents by (bucket, offset): the order reads are issued in.
func extentLess(a, b bucketstore.Extent) bool {
	return a.Bucket < b.Bucket || (a.Bucket == b.Bucket && a.Offset < b.Offset)
}

// corruptEntry answers a key whose metadata entry names an extent no record can have
// (fsm.CheckEntry: misaligned, too long, a Length that does not match Size): Corrupt, and its
// removal through Raft, as for a record that fails verification. Its extent is not freed
// (OnApplied): it was never a record of this key, and the bytes may be another's.
func (c *Coordinator) corruptEntry(ctx context.Context, key string, e fsm.Entry, why error) kvoffload.GetResult {
	c.stats.getCorrupt.Add(1)
	c.lg.Error("corrupt metadata; removing the key from metadata", "key", key, "owner", e.Owner, "extent", e.Extent, "err", why)
	c.repair(ctx, []fsm.KeyGen{{Key: key, Gen: e.Gen}})
	return kvoffload.GetResult{Key: key, Status: kvoffload.Corrupt, Reason: "corrupt metadata: " + why.Error()}
}

// repair removes corrupt keys' metadata (only the generations that were read) in one
// proposal; OnApplied frees their bytes if no other live entry references them, and repair
// waits for the reclaimer to have done so (as Remove and eviction do), so that a read that
// answered Corrupt returns with the bytes' accounting settled: a check of live bytes against
// the metadata right after it (TestC12BucketBitFlip's) found the record's bytes still
// counted. A stalled disk bounds the wait by CommitTimeout, as for eviction: an embedded
// read may have no deadline of its own.
func (c *Coordinator) repair(ctx context.Context, keys []fsm.KeyGen) {
	if len(keys) == 0 {
		return
	}
	cmd := fsm.EncodeRemove(fsm.Remove{TxnID: kvoffload.NewTxnID(), Keys: keys, Reason: "corrupt record"})
	if _, err := c.propose(context.WithoutCancel(ctx), cmd, once); err != nil {
		c.lg.Warn("repair of corrupt keys failed; they stay kvoffload.Corrupt until retried", "keys", len(keys), "first", keys[0].Key, "err", err)
		return
	}
	fctx, cancel := context.WithTimeout(ctx, c.cfg.CommitTimeout)
	defer cancel()
	if err := c.reclaim.flush(fctx); err != nil {
		c.lg.Warn("corrupt keys removed; their bytes are not freed yet (disk stalled?)", "keys", len(keys), "first", keys[0].Key, "err", err)
	}
}
