package fsm

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/kvoffload/kvoffload/internal/invariants"
	"github.com/kvoffload/kvoffload/internal/mutant"
)

// state is the replicated metadata. It is only ever mutated under FSM.mu, by
// the apply functions below, and must stay deterministic: no clock, no
// randomness, no map-order dependence in anything that is hashed or encoded.
type state struct {
	live liveSet // key -> live entry (liveset.go)
	// gens holds the last generation used by each key that is not live (removed, or burnt by
	// a remove of an absent key). A live key's generation is its entry's Gen, kept once, not
	// here too (gen): the table would otherwise hold every live key twice (issue 9, memory).
	gens    map[string]uint64
	txns    map[TxnID]*record // txn -> recorded result (record.go); records are never mutated
	members map[string]Member // node ID -> member record
	removed map[string]bool   // node IDs a SetMember with Remove deleted: they never join again
	cluster string            // the cluster's ID ("" until a SetCluster is applied)
	applied uint64            // highest raft index applied

	// Derived from live (not encoded, rebuilt on restore), kept up to date
	// by addLive and delLive so readers need not scan.
	bytes   int64                   // sum of Size over live
	owners  map[string]OwnerStats   // Entry.Owner -> its live keys and bytes; no zero entries
	extents map[chunkKey]*chunkList // the extent index (extent.go)
	// lastKey and lastList are the chunk of the extent index looked up last (lastList nil:
	// none), so that the neighbouring records of one COMMIT, which share a chunk, cost one
	// map lookup rather than three each (s.chunk).
	lastKey  chunkKey
	lastList *chunkList
}

func newState() *state {
	return &state{
		gens:    make(map[string]uint64),
		txns:    make(map[TxnID]*record),
		members: make(map[string]Member),
		removed: make(map[string]bool),
		owners:  make(map[string]OwnerStats),
		extents: make(map[chunkKey]*chunkList),
	}
}

// gen returns the last generation used by key, live or not (0: never).
func (s *state) gen(key string) uint64 {
	if e, ok := s.live.get(key); ok {
		return e.Gen
	}
	return s.gens[key]
}

// addLive makes e live and counts it; its generation is e.Gen from now on. The key must not
// be live.
func (s *state) addLive(e Entry) {
	s.addLiveUncounted(e)
	s.countOwner(e.Owner, 1, int64(e.Size))
}

// addLiveUncounted is addLive without e's owner's counters, for a caller that adds many keys
// of one owner and counts them once (countOwner): two lookups of the owner's name per key
// were a tenth of a 1M-key log replay's apply (node's BenchmarkStartup, -cpuprofile).
func (s *state) addLiveUncounted(e Entry) {
	if invariants.Enabled && e.Gen <= s.gens[e.Key] {
		invariants.Failf("fsm: generations only grow", "key %q made live at generation %d, its last was %d", e.Key, e.Gen, s.gens[e.Key])
	}
	delete(s.gens, e.Key)
	slot := s.live.add(e)
	s.bytes += int64(e.Size)
	s.indexAdd(e, slot)
}

// countOwner adds keys live keys of size bytes to owner's counters.
func (s *state) countOwner(owner string, keys int, bytes int64) {
	if invariants.Enabled && (keys < 0 || bytes < 0) {
		invariants.Failf("fsm: an owner's counters grow by what is made live", "owner %q: %d keys, %d bytes", owner, keys, bytes)
	}
	if keys == 0 {
		return
	}
	o := s.owners[owner]
	o.Keys += keys
	o.Bytes += bytes
	s.owners[owner] = o
}

// delLive removes the live entry e and uncounts it.
func (s *state) delLive(e Entry) {
	s.materialize(e.TxnID) // its txn's record may refer to e (record.go)
	slot, _ := s.live.slot(e.Key)
	s.indexDel(e, slot)
	s.live.del(e.Key)
	s.bytes -= int64(e.Size)
	o := s.owners[e.Owner]
	o.Keys--
	o.Bytes -= int64(e.Size)
	if invariants.Enabled && (s.bytes < 0 || o.Keys < 0 || o.Bytes < 0 || o.Keys == 0 && o.Bytes != 0) {
		invariants.Failf("fsm: the byte and owner counters equal a recount of the live entries",
			"after removing %q (%d bytes): bytes %d, owner %q %+v", e.Key, e.Size, s.bytes, e.Owner, o)
	}
	if o.Keys == 0 {
		delete(s.owners, e.Owner)
	} else {
		s.owners[e.Owner] = o
	}
}

// FSM is the replicated key -> extent metadata. All methods are safe for
// concurrent use; ApplyCommand and Restore take the write lock, readers the
// read lock.
type FSM struct {
	mu       sync.RWMutex
	st       *state
	watch    func(*Result)
	restored func(RestoreDiff)
	changes  ChangeHook // WatchChanges
	// hooked is the applied index whose hooks (Watch, WatchRestore) have returned: what
	// waiting for "applied here" must wait for, since the hooks run after the lock is
	// released: a Remove on a follower must not return before its free is queued.
	hooked atomic.Uint64
	// advMu guards adv, the channel Advanced returned, closed (and dropped) when hooked
	// is next stored.
	advMu sync.Mutex
	adv   chan struct{}
}

// HookedIndex returns the highest applied Raft index whose Watch or WatchRestore hook has
// returned (AppliedIndex, once the hooks of the commands up to it have run).
func (f *FSM) HookedIndex() uint64 { return f.hooked.Load() }

// Advanced returns a channel closed the next time HookedIndex is set, by an applied command
// or a Restore. A waiter takes it before reading HookedIndex, then waits on it: an advance
// after the read closes it, so none is missed.
func (f *FSM) Advanced() <-chan struct{} {
	f.advMu.Lock()
	defer f.advMu.Unlock()
	if f.adv == nil {
		f.adv = make(chan struct{})
	}
	return f.adv
}

// setHooked records applied as the hooked index and wakes the waiters of Advanced.
func (f *FSM) setHooked(applied uint64) {
	f.hooked.Store(applied)
	f.advMu.Lock()
	if f.adv != nil {
		close(f.adv)
		f.adv = nil
	}
	f.advMu.Unlock()
}

// RestoreDiff is what a Restore changed in the live entries: the commands folded into a
// snapshot never reach the Watch hook, so a node that catches up by InstallSnapshot learns
// of them here.
type RestoreDiff struct {
	From, To uint64  // applied raft index before and after the Restore
	Gone     []Entry // live before, and not live (or live in another version) after
	Added    []Entry // live after, and not live (or live in another version) before
	// Shared are the entries of Gone whose extent overlaps an entry live after the Restore
	// (same owner and bucket): their bytes are still referenced and must not be freed.
	Shared []Entry
}

// WatchRestore installs fn, called after each successful Restore on the restoring
// goroutine, outside the lock. fn must not call ApplyCommand or Restore, and must not block,
// as for Watch: Raft applies nothing more until it returns. nil removes the hook. Install it
// before the FSM is handed to raft.
func (f *FSM) WatchRestore(fn func(RestoreDiff)) {
	f.mu.Lock()
	f.restored = fn
	f.mu.Unlock()
}

// diffLive compares the live entries of two states; an entry counts as changed when its
// txn ID, generation or extent differ.
func diffLive(old, cur *state) RestoreDiff {
	d := RestoreDiff{From: old.applied, To: cur.applied}
	same := func(a, b Entry) bool { return a.TxnID == b.TxnID && a.Gen == b.Gen && a.Extent == b.Extent }
	old.live.each(func(e Entry) bool {
		if n, ok := cur.live.get(e.Key); !ok || !same(e, n) {
			d.Gone = append(d.Gone, e)
			if _, shared := cur.overlapping(e.Owner, e.Extent, ""); shared {
				d.Shared = append(d.Shared, e)
			}
		}
		return true
	})
	cur.live.each(func(e Entry) bool {
		if o, ok := old.live.get(e.Key); !ok || !same(o, e) {
			d.Added = append(d.Added, e)
		}
		return true
	})
	return d
}

// New returns an empty FSM.
func New() *FSM { return &FSM{st: newState()} }

// Watch installs fn, called after each command that records a new Result
// (not for de-duplicated commands, not for Restore), on the applying
// goroutine and outside the lock, with the Result the caller of ApplyCommand
// gets. fn must not change the Result, nor keep it or its Keys after it returns
// (copy what it keeps: a copy per command was 125 MB of garbage in a 1M-key
// start-up's log replay). fn must not call ApplyCommand or Restore, and must
// not block: it runs on Raft's apply goroutine, so while it runs no later
// command is applied and every WaitApplied and read index waits. Do no I/O in
// it and wait on nothing; hand slow work to another goroutine without a bound
// that could make fn wait (txn's reclaimer queues the frees of removed
// extents). nil removes the hook. Install it before the FSM is handed to raft.
func (f *FSM) Watch(fn func(*Result)) {
	f.mu.Lock()
	f.watch = fn
	f.mu.Unlock()
}

// ApplyCommand applies the command data committed at raft log index and
// returns its Result (a copy the caller may keep). A command whose TxnID
// already has a recorded Result changes nothing and returns that Result.
//
// ApplyCommand panics if data does not decode: replicas would otherwise
// diverge (a newer binary wrote the log, or the log is corrupt). Proposers
// must check commands with Decode before proposing them.
func (f *FSM) ApplyCommand(index uint64, data []byte) *Result {
	t, cmd, err := Decode(data)
	return f.applyDecoded(index, data, t, cmd, err)
}

// ApplyCommands applies data[i], committed at raft log index[i], for each i in order, as
// ApplyCommand would one at a time, and returns their Results (len(data) of them; index and
// data have the same length). It decodes the commands on a goroutine of its own, ahead of
// the one applying them: decoding was a quarter of the CPU of replaying the Raft log at
// start-up (1M keys, a CPU profile of node.Open; docs/benchmarks.md), and apply runs under
// the FSM's lock. A command that does not decode panics, as in ApplyCommand, once every
// command before it is applied.
func (f *FSM) ApplyCommands(index []uint64, data [][]byte) []*Result {
	out := make([]*Result, len(data))
	if len(data) <= 1 { // nothing to decode ahead of
		for i := range data {
			out[i] = f.ApplyCommand(index[i], data[i])
		}
		return out
	}
	type decoded struct {
		t   CommandType
		cmd any
		err error
	}
	ahead := make(chan decoded, len(data)) // never full: the decoder never waits
	go func() {
		for _, d := range data {
			t, cmd, err := Decode(d)
			ahead <- decoded{t, cmd, err}
		}
	}()
	for i := range data {
		d := <-ahead
		out[i] = f.applyDecoded(index[i], data[i], d.t, d.cmd, d.err)
	}
	return out
}

// applyDecoded applies cmd, decoded from data (t and err are Decode's), at index.
func (f *FSM) applyDecoded(index uint64, data []byte, t CommandType, cmd any, err error) *Result {
	if err != nil {
		panic(fmt.Sprintf("fsm: cannot apply command at raft index %d (type byte %d, %d bytes): %v; "+
			"replicas must not diverge: is a newer or older binary writing the log, or is the log corrupt?",
			index, uint8(t), len(data), err))
	}
	f.mu.Lock()
	res, fresh := f.st.apply(index, cmd)
	watch, applied, changes := f.watch, f.st.applied, f.changes
	f.mu.Unlock()
	// res is this call's own (the state keeps a record, record.go): the hook reads it, then
	// the caller gets it.
	if len(res.Keys) == 0 {
		res.Keys = nil
	}
	if fresh && watch != nil {
		watch(res)
	}
	if changes != nil {
		var ch []Change
		if fresh { // a de-duplicated command changes nothing
			ch = changesOf(index, cmd, res)
		}
		changes.Applied(index, ch)
	}
	f.setHooked(applied) // ApplyCommand and Restore run on one goroutine (raft's FSM)
	return res
}

// apply dispatches one decoded command. fresh reports whether a new Result
// was recorded (false: de-duplicated).
func (s *state) apply(index uint64, cmd any) (res *Result, fresh bool) {
	s.applied = max(s.applied, index)
	id, ok := commandTxn(cmd)
	if !ok {
		panic(fmt.Sprintf("fsm: apply at index %d: no handler for %T (Decode and apply disagree)", index, cmd))
	}
	if r, ok := s.txns[id]; ok && !(mutant.On(mutant.DoubleApply) && r.hdr.Type == CmdCommit) { // mutation test only
		return s.expand(r), false
	}
	switch c := cmd.(type) {
	case Commit:
		res = s.applyCommit(index, c)
	case Abort:
		res = &Result{TxnID: c.TxnID, Type: CmdAbort, Index: index, Aborted: true}
	case Remove:
		res = s.applyRemove(index, c)
	case SetMember:
		res = s.applyMember(index, c)
	case Prune:
		for id, r := range s.txns {
			if r.hdr.Index < c.Before {
				delete(s.txns, id)
			}
		}
		res = &Result{TxnID: c.TxnID, Type: CmdPrune, Index: index}
	case SetCluster:
		res = &Result{TxnID: c.TxnID, Type: CmdCluster, Index: index}
		switch s.cluster {
		case "":
			s.cluster = c.ID
		case c.ID:
		default:
			res.Aborted = true // another cluster's ID: refused, nothing changes
		}
	}
	s.txns[id] = s.record(res)
	return res, true
}

// commandTxn returns the TxnID of a decoded command.
func commandTxn(cmd any) (TxnID, bool) {
	switch c := cmd.(type) {
	case Commit:
		return c.TxnID, true
	case Abort:
		return c.TxnID, true
	case Remove:
		return c.TxnID, true
	case SetMember:
		return c.TxnID, true
	case Prune:
		return c.TxnID, true
	case SetCluster:
		return c.TxnID, true
	}
	return TxnID{}, false
}

func (s *state) applyCommit(index uint64, c Commit) *Result {
	res := &Result{TxnID: c.TxnID, Type: CmdCommit, Index: index, Keys: make([]KeyOutcome, 0, len(c.Entries))}
	s.live.idx.Warm(func(i int) string { return c.Entries[i].Key }, len(c.Entries))
	added, addedBytes := 0, int64(0) // every entry's owner is c.Node: counted once, at the end
	for _, e := range c.Entries {
		e.Owner, e.TxnID = c.Node, c.TxnID
		ko := KeyOutcome{Key: e.Key}
		if cur, ok := s.live.get(e.Key); ok {
			ko.Entry = cur
			if cur.Sum == e.Sum && cur.Size == e.Size {
				ko.Outcome = OutcomeAlreadyStored
			} else {
				ko.Outcome = OutcomeConflict
			}
		} else if e.Gen <= s.gens[e.Key] {
			ko.Outcome = OutcomeStale
		} else if s.refused(e) {
			ko.Outcome = OutcomeInvalid
		} else {
			s.addLiveUncounted(e)
			added, addedBytes = added+1, addedBytes+int64(e.Size)
			ko.Outcome, ko.Entry = OutcomeStored, e
		}
		res.Keys = append(res.Keys, ko)
	}
	s.countOwner(c.Node, added, addedBytes)
	return res
}

// refused reports whether apply refuses to make e live: its extent is out of the bounds of
// any record (negative, or longer than MaxRecordLength), or it overlaps the extent of a live
// entry of the same owner and bucket (CheckCommit). These are the deterministic checks; the
// format checks of CheckEntry stay with the leader and the readers, so a command that
// predates them applies as it did.
func (s *state) refused(e Entry) bool {
	x := e.Extent
	if x.Offset < 0 || x.Length < 0 || x.Length > MaxRecordLength || x.Offset > 1<<62 {
		return true
	}
	_, overlap := s.overlaps(e.Owner, x, e.Key, true) // apply holds the write lock
	return overlap
}

func (s *state) applyRemove(index uint64, r Remove) *Result {
	res := &Result{TxnID: r.TxnID, Type: CmdRemove, Index: index, Keys: make([]KeyOutcome, 0, len(r.Keys))}
	for _, kg := range r.Keys {
		ko := KeyOutcome{Key: kg.Key, Outcome: OutcomeAbsent}
		cur, ok := s.live.get(kg.Key)
		switch {
		case !ok:
			// Burn a generation, so an in-flight commit that read the old
			// generation lands Stale: a removed key never comes back from an
			// older write.
			s.gens[kg.Key]++
		case kg.Gen == 0 || kg.Gen == cur.Gen:
			if !mutant.On(mutant.RemoveNotApplied) { // mutation test only
				s.delLive(cur)
			}
			s.gens[kg.Key] = cur.Gen + 1
			ko.Outcome, ko.Entry = OutcomeRemoved, cur
			_, ko.Shared = s.overlapping(cur.Owner, cur.Extent, "")
		}
		res.Keys = append(res.Keys, ko)
	}
	return res
}

// applyMember records or deletes a member; a deleted member's ID is kept as removed
// (WasRemoved). Its Result has no Keys.
func (s *state) applyMember(index uint64, m SetMember) *Result {
	if m.Remove {
		delete(s.members, m.Member.NodeID)
		s.removed[m.Member.NodeID] = true
	} else {
		s.members[m.Member.NodeID] = m.Member
	}
	return &Result{TxnID: m.TxnID, Type: CmdMember, Index: index}
}

// WasRemoved reports whether node id was deleted from the member directory (Leave): a
// removed ID never joins the cluster again (its certificate stays valid until the CA is
// rotated, docs/security.md; its old data directory must not come back, docs/operations.md).
func (f *FSM) WasRemoved(id string) bool {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.st.removed[id]
}

// Lookup returns the live entry of key.
func (f *FSM) Lookup(key string) (Entry, bool) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	e, ok := f.st.live.get(key)
	return e, ok
}

// LookupEach reports on n keys (key(i) for i < n) under one hold of the read lock: fn(i, e,
// true, e.Gen) for a live key, fn(i, Entry{}, false, gen) with the last generation used by
// one that is not (0 if never), as Lookup and Generation would one by one. The keys' home
// cells in the index are loaded first. fn runs under the read lock: it must not call the FSM.
// An offload's admission looks up its batch's keys this way, while it holds the in-flight
// table's lock: two read locks per key had it wait on apply's write lock again and again.
func (f *FSM) LookupEach(n int, key func(i int) string, fn func(i int, e Entry, live bool, gen uint64)) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	f.st.live.idx.Warm(key, n)
	for i := range n {
		k := key(i)
		if e, ok := f.st.live.get(k); ok {
			fn(i, e, true, e.Gen)
		} else {
			fn(i, Entry{}, false, f.st.gens[k])
		}
	}
}

// Generation returns the last generation used by key (live or removed), 0 if never.
func (f *FSM) Generation(key string) uint64 {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.st.gen(key)
}

// TxnResult returns a copy of the recorded outcome of txn id.
func (f *FSM) TxnResult(id TxnID) (*Result, bool) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	r, ok := f.st.txns[id]
	if !ok {
		return nil, false
	}
	return f.st.expand(r), true
}

// AppliedIndex returns the highest raft index applied (or restored).
func (f *FSM) AppliedIndex() uint64 {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.st.applied
}

// ForEach calls fn for each live entry in key order until fn returns false.
// It works on a copy taken under the read lock, so fn may call other FSM methods.
func (f *FSM) ForEach(fn func(Entry) bool) {
	entries := f.liveCopy()
	for _, at := range keyOrder(entries) {
		if !fn(entries[at]) {
			return
		}
	}
}

// LiveOf returns a copy of the live entries whose bytes owner holds, in no particular order;
// the caller owns it. Start-up recovery orders them itself (by extent), and sorting 1M keys
// first cost it ~0.3 s of CPU (node's BenchmarkStartup, -cpuprofile); handing out one slice
// instead of calling back per entry lets it order them in place, without a second copy.
// The copy is sized to the owner's live keys (state.owners), not to every live key: on a
// node of a cluster of N it is 1/N of the entries.
func (f *FSM) LiveOf(owner string) []Entry {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.st.live.valuesOf(owner, f.st.owners[owner].Keys)
}

// liveCopy returns a copy of every live entry, taken under the read lock, in slot order.
func (f *FSM) liveCopy() []Entry {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.st.live.values()
}

// ClusterID returns the cluster's ID, "" before one was recorded (SetCluster).
func (f *FSM) ClusterID() string {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.st.cluster
}

// Members returns every member record, sorted by NodeID.
func (f *FSM) Members() []Member {
	f.mu.RLock()
	ms := slices.Collect(maps.Values(f.st.members))
	f.mu.RUnlock()
	slices.SortFunc(ms, func(a, b Member) int { return strings.Compare(a.NodeID, b.NodeID) })
	return ms
}

// Member returns the member record of node id.
func (f *FSM) Member(id string) (Member, bool) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	m, ok := f.st.members[id]
	return m, ok
}

// Owners returns, per Entry.Owner, the number of live keys and the sum of
// their Size. Owners without live keys are absent. The map is a copy; the
// counters are maintained on apply, so this costs O(owners), not O(keys).
func (f *FSM) Owners() map[string]OwnerStats {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return maps.Clone(f.st.owners)
}

// Stats returns counters describing the state.
func (f *FSM) Stats() Stats {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return Stats{
		Keys:         f.st.live.len(),
		Bytes:        f.st.bytes,
		Generations:  f.st.live.len() + len(f.st.gens), // disjoint: gens holds keys not live
		Txns:         len(f.st.txns),
		Members:      len(f.st.members),
		AppliedIndex: f.st.applied,
	}
}
