package txn

import (
	"context"
	"errors"
	"sort"
	"sync"
	"sync/atomic"

	"github.com/cespare/xxhash/v2"

	"github.com/kvoffload/kvoffload"
	"github.com/kvoffload/kvoffload/bucketstore"
	"github.com/kvoffload/kvoffload/fsm"
)

func xxhashOf(b []byte) uint64 { return xxhash.Sum64(b) }

// BatchGet reads keys and returns one result per key, in input order. Every returned value
// has been verified against its record header and the metadata (key, txn ID, generation,
// length, xxhash64). A record that fails verification is reported Corrupt and its key is
// removed from the metadata, so later reads see NotFound rather than wrong bytes. Reads are
// issued in (bucket, offset) order. A key named more than once is read once, and every
// position gets the same answer (a Corrupt record is not reported NotFound at its second
// position because the first removed it).
func (c *Coordinator) BatchGet(ctx context.Context, keys []string) ([]kvoffload.GetResult, error) {
	if err := c.Usable(); err != nil {
		return nil, err
	}
	if len(keys) > c.cfg.MaxBatchKeys {
		return nil, BatchKeysError(uint64(len(keys)), keys[c.cfg.MaxBatchKeys], c.cfg.MaxBatchKeys)
	}
	uniq, pos := collapse(keys)
	times := make([]int64, len(uniq)) // positions per distinct key: MaxBatchBytes counts each
	for _, p := range pos {
		times[p]++
	}
	res, err := c.batchGet(ctx, uniq, times)
	if err != nil {
		return nil, err
	}
	c.stats.gets.Add(uint64(len(keys)))
	fillGetCodes(res)
	if len(uniq) == len(keys) {
		return res, nil
	}
	out := make([]kvoffload.GetResult, len(keys))
	seen := make([]bool, len(uniq))
	for i, p := range pos {
		out[i] = res[p]
		if seen[p] && out[i].Value != nil { // every position owns its bytes
			out[i].Value = append([]byte(nil), out[i].Value...)
		}
		seen[p] = true
	}
	return out, nil
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

// batchGet is BatchGet for keys without repeats; keys[i] counts times[i] times against
// MaxBatchBytes.
func (c *Coordinator) batchGet(ctx context.Context, keys []string, times []int64) ([]kvoffload.GetResult, error) {
	out := make([]kvoffload.GetResult, len(keys))
	order := make([]int, len(keys))
	entries := make([]fsm.Entry, len(keys))
	var misses []int
	for i, k := range keys {
		out[i].Key, order[i] = k, i
		if e, ok := c.meta.Lookup(k); ok {
			entries[i] = e
		} else {
			misses = append(misses, i)
		}
	}
	if err := c.confirmMisses(ctx, keys, misses, entries); err != nil {
		for _, i := range misses {
			out[i].Status, out[i].Reason = kvoffload.Unavailable, "not in this node's metadata, which could not be brought up to date: "+err.Error()
		}
	}
	var total int64
	over := "" // the key at which the values' total first exceeds MaxBatchBytes
	for i := range keys {
		switch {
		case out[i].Status != 0:
		case entries[i].Key == "": // absent, and confirmed absent
			out[i].Status = kvoffload.NotFound
		case fsm.CheckEntry(entries[i]) != nil:
			// Refused before its Size counts against MaxBatchBytes or its Length is allocated,
			// whichever node owns it: a bad entry must not fail the batch or exhaust memory.
			out[i] = c.corruptEntry(ctx, keys[i], entries[i], fsm.CheckEntry(entries[i]))
		default:
			if total += int64(entries[i].Size) * times[i]; total > c.cfg.MaxBatchBytes && over == "" {
				over = keys[i]
			}
		}
	}
	if total > c.cfg.MaxBatchBytes {
		return nil, BatchBytesError(uint64(total), over, c.cfg.MaxBatchBytes)
	}
	sort.SliceStable(order, func(a, b int) bool {
		ea, eb := entries[order[a]].Extent, entries[order[b]].Extent
		return ea.Bucket < eb.Bucket || (ea.Bucket == eb.Bucket && ea.Offset < eb.Offset)
	})
	remote := map[string][]int{} // owner -> indexes of keys it holds
	var local []int              // in extent order
	for _, i := range order {
		if out[i].Status != 0 {
			continue
		}
		if owner := entries[i].Owner; owner != c.cfg.NodeID {
			remote[owner] = append(remote[owner], i)
			continue
		}
		local = append(local, i)
	}
	var wg sync.WaitGroup
	if len(remote) > 0 {
		wg.Add(1)
		go func() { defer wg.Done(); c.readRemote(ctx, keys, entries, remote, out) }()
	}
	c.readLocal(ctx, keys, entries, local, out)
	wg.Wait()
	return out, nil
}

// readLocal reads the records of keys[i] for i in idx (in extent order) into out[i], with up
// to Config.ReadsInFlight reads in flight: each reader takes the next index, so the device
// sees a queue of nearby reads rather than one pread at a time.
func (c *Coordinator) readLocal(ctx context.Context, keys []string, entries []fsm.Entry, idx []int, out []kvoffload.GetResult) {
	readers := c.cfg.ReadsInFlight
	if readers <= 0 {
		readers = 32
	}
	readers = min(readers, len(idx))
	var next atomic.Int64
	read := func() {
		for j := int(next.Add(1) - 1); j < len(idx); j = int(next.Add(1) - 1) {
			i := idx[j]
			if err := ctx.Err(); err != nil {
				out[i].Status, out[i].Code, out[i].Reason = kvoffload.Unavailable, kvoffload.CodeCanceled, err.Error()
				continue
			}
			out[i] = c.get(ctx, keys[i], entries[i])
		}
	}
	var wg sync.WaitGroup
	for range readers - 1 {
		wg.Add(1)
		go func() { defer wg.Done(); read() }()
	}
	if readers > 0 {
		read() // the calling goroutine is one of the readers
	}
	wg.Wait()
}

// confirmMisses makes a miss linearizable: if keys[i] for i in misses were absent from local
// metadata, it brings the metadata up to date with Meta.ReadIndex (a no-op on a single
// node), bounded by ReadIndexTimeout, and looks them up again, filling entries[i] for each
// one found. A key acknowledged through any node before the read began is then found. It
// returns ReadIndex's error, leaving entries unchanged.
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
		}
	}
	return nil
}

// readRemote fills in the keys whose bytes live on other nodes, one call per owner, in
// parallel. Without a Remote (single node) they are Unavailable.
func (c *Coordinator) readRemote(ctx context.Context, keys []string, entries []fsm.Entry, byOwner map[string][]int, out []kvoffload.GetResult) {
	var wg sync.WaitGroup
	for owner, idx := range byOwner {
		if c.remote == nil {
			for _, i := range idx {
				out[i] = kvoffload.GetResult{Key: keys[i], Status: kvoffload.Unavailable, Reason: "owned by node " + owner}
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
					out[i] = kvoffload.GetResult{Key: keys[i], Status: kvoffload.Unavailable, Reason: "owner " + owner + " returned too few results"}
					continue
				}
				out[i] = res[j]
				// The owner verified the record; check the bytes against this node's metadata too,
				// so a stale owner or a damaged transfer never reaches the caller (G3).
				e := entries[i]
				if r := &out[i]; r.Status == kvoffload.Found && (uint32(len(r.Value)) != e.Size || xxhashOf(r.Value) != e.Sum) {
					*r = kvoffload.GetResult{Key: r.Key, Status: kvoffload.Unavailable, Reason: "owner " + owner + " returned bytes that do not match the metadata"}
				}
			}
		}()
	}
	wg.Wait()
}

// BatchGetLocal reads only keys whose bytes this node owns (the owner side of a forwarded
// read); keys the local metadata assigns to another node are Unavailable.
func (c *Coordinator) BatchGetLocal(ctx context.Context, keys []string) ([]kvoffload.GetResult, error) {
	if err := c.Usable(); err != nil {
		return nil, err
	}
	if len(keys) > c.cfg.MaxBatchKeys {
		return nil, BatchKeysError(uint64(len(keys)), keys[c.cfg.MaxBatchKeys], c.cfg.MaxBatchKeys)
	}
	out := make([]kvoffload.GetResult, len(keys))
	for i, k := range keys {
		e, ok := c.meta.Lookup(k)
		switch {
		case ctx.Err() != nil:
			out[i] = kvoffload.GetResult{Key: k, Status: kvoffload.Unavailable, Code: kvoffload.CodeCanceled, Reason: ctx.Err().Error()}
		case !ok:
			out[i] = kvoffload.GetResult{Key: k, Status: kvoffload.NotFound}
		case e.Owner != c.cfg.NodeID:
			out[i] = kvoffload.GetResult{Key: k, Status: kvoffload.Unavailable, Reason: "not owned by node " + c.cfg.NodeID}
		default:
			out[i] = c.get(ctx, k, e)
		}
	}
	c.stats.gets.Add(uint64(len(keys)))
	fillGetCodes(out)
	return out, nil
}

// get reads one committed entry. The extent is pinned, then the metadata is checked again:
// bytes are freed only after their removal is applied, so an entry still present after the
// pin cannot be freed under the reader.
func (c *Coordinator) get(ctx context.Context, key string, e fsm.Entry) kvoffload.GetResult {
	if err := fsm.CheckEntry(e); err != nil {
		return c.corruptEntry(ctx, key, e, err)
	}
	ext := e.Extent
	c.reclaim.pin(ext)
	defer c.reclaim.unpin(ext)
	if cur, ok := c.meta.Lookup(key); !ok || cur.TxnID != e.TxnID || cur.Gen != e.Gen {
		return kvoffload.GetResult{Key: key, Status: kvoffload.NotFound, Reason: "removed while reading"}
	}
	want := bucketstore.Header{Key: key, TxnID: e.TxnID, Generation: e.Gen, PayloadLen: e.Size, PayloadSum: e.Sum}
	val, err := c.data.Read(ext, want)
	if err == nil {
		c.ev.lru.touch(key)
		return kvoffload.GetResult{Key: key, Status: kvoffload.Found, Value: val}
	}
	if !errors.Is(err, bucketstore.ErrCorrupt) {
		return kvoffload.GetResult{Key: key, Status: kvoffload.Unavailable, Reason: err.Error()}
	}
	c.stats.getCorrupt.Add(1)
	c.lg.Error("corrupt record; removing the key from metadata", "key", key, "extent", ext, "err", err)
	c.repair(ctx, key, e)
	return kvoffload.GetResult{Key: key, Status: kvoffload.Corrupt, Reason: err.Error()}
}

// corruptEntry answers a key whose metadata entry names an extent no record can have
// (fsm.CheckEntry: misaligned, too long, a Length that does not match Size): Corrupt, and its
// removal through Raft, as for a record that fails verification. Its extent is not freed
// (OnApplied): it was never a record of this key, and the bytes may be another's.
func (c *Coordinator) corruptEntry(ctx context.Context, key string, e fsm.Entry, why error) kvoffload.GetResult {
	c.stats.getCorrupt.Add(1)
	c.lg.Error("corrupt metadata; removing the key from metadata", "key", key, "owner", e.Owner, "extent", e.Extent, "err", why)
	c.repair(ctx, key, e)
	return kvoffload.GetResult{Key: key, Status: kvoffload.Corrupt, Reason: "corrupt metadata: " + why.Error()}
}

// repair removes a corrupt key's metadata (only the generation that was read); OnApplied
// frees its bytes if no other live entry references them.
func (c *Coordinator) repair(ctx context.Context, key string, e fsm.Entry) {
	cmd := fsm.EncodeRemove(fsm.Remove{TxnID: kvoffload.NewTxnID(), Keys: []fsm.KeyGen{{Key: key, Gen: e.Gen}}, Reason: "corrupt record"})
	if _, err := c.propose(context.WithoutCancel(ctx), cmd); err != nil {
		c.lg.Warn("repair of a corrupt key failed; it stays kvoffload.Corrupt until retried", "key", key, "err", err)
	}
}
