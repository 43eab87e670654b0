package fsm

import "strings"

// ChangeKind says what happened to a key.
type ChangeKind uint8

// The kinds of change. The values are wire format of the event stream: never renumber them.
const (
	ChangeStored  ChangeKind = 1 // the key became live (a COMMIT's OutcomeStored)
	ChangeRemoved ChangeKind = 2 // the key stopped being live (a REMOVE's OutcomeRemoved)
)

// Cause says why a key was removed. The values are wire format of the event stream: never
// renumber them.
type Cause uint8

// The causes of a removal, derived from the REMOVE command's Reason (RemoveCause).
const (
	CauseNone      Cause = 0 // a Stored change
	CauseRemoved   Cause = 1 // a client's Remove
	CauseEvicted   Cause = 2 // capacity eviction by the owner
	CauseOwnerLeft Cause = 3 // the owner left the cluster (Leave)
	CausePruned    Cause = 4 // the store dropped it: its bucket was lost or its record or metadata corrupt
)

// String returns the cause's name as the event stream's JSON spells it.
func (c Cause) String() string {
	switch c {
	case CauseNone:
		return ""
	case CauseRemoved:
		return "removed"
	case CauseEvicted:
		return "evicted"
	case CauseOwnerLeft:
		return "owner_left"
	case CausePruned:
		return "pruned"
	}
	return "unknown"
}

// The prefixes of the Remove reasons the store's own proposers use that RemoveCause maps
// ("remove", a client's, and any other are CauseRemoved).
const (
	reasonEvictPrefix  = "evicted"           // "evicted: capacity"
	reasonOwnerPrefix  = "owner "            // "owner <id> left the cluster"
	reasonOwnerSuffix  = " left the cluster" //
	reasonBucketPrefix = "bucket "           // "bucket <n> lost"
	reasonCorrupt      = "corrupt"           // "corrupt metadata", "corrupt record"
)

// RemoveCause maps a REMOVE command's Reason to the Cause its removals are reported with.
// The Reason is replicated with the command, so every member derives the same Cause. A
// reason this binary does not know is CauseRemoved.
func RemoveCause(reason string) Cause {
	switch {
	case strings.HasPrefix(reason, reasonEvictPrefix):
		return CauseEvicted
	case strings.HasPrefix(reason, reasonOwnerPrefix) && strings.HasSuffix(reason, reasonOwnerSuffix):
		return CauseOwnerLeft
	case strings.HasPrefix(reason, reasonBucketPrefix), strings.HasPrefix(reason, reasonCorrupt):
		return CausePruned
	}
	return CauseRemoved
}

// Change is one key's change by one applied command. Within the command at Raft index
// Index, the changes are numbered from Ordinal 1 in the order of the command's keys; only
// keys that changed are numbered (an AlreadyStored, Stale or Absent key has none), so
// (Index, Ordinal) is the same on every member.
type Change struct {
	Index   uint64
	Ordinal uint32
	Kind    ChangeKind
	Key     string
	Size    uint32 // payload bytes of the stored (or removed) version
	Owner   string // node holding (or that held) the bytes
	Gen     uint64 // generation of the stored (or removed) version
	Cause   Cause  // Removed only
}

// ChangeHook receives the key changes of applied commands, in Raft order, on Raft's apply
// goroutine. Its methods must not block or call ApplyCommand or Restore (the rules of
// Watch), and must not keep changes after returning (copy what they keep).
type ChangeHook interface {
	// Applied is called once per applied command, after its Watch hook, with its changes,
	// possibly none (a de-duplicated command changes nothing).
	Applied(index uint64, changes []Change)
	// Restored is called after each successful Restore, with the restored applied index:
	// the commands folded into the snapshot are not reported, so what was reported up to
	// here does not lead to the state restored.
	Restored(index uint64)
}

// WatchChanges installs h (nil removes it). Install it before the FSM is handed to Raft, so
// that the Restore of the newest snapshot and the replay of the log after it are reported.
func (f *FSM) WatchChanges(h ChangeHook) {
	f.mu.Lock()
	f.changes = h
	f.mu.Unlock()
}

// changesOf returns the key changes of cmd, applied with Result res.
func changesOf(index uint64, cmd any, res *Result) []Change {
	var want Outcome
	var kind ChangeKind
	cause := CauseNone
	switch c := cmd.(type) {
	case Commit:
		want, kind = OutcomeStored, ChangeStored
	case Remove:
		want, kind, cause = OutcomeRemoved, ChangeRemoved, RemoveCause(c.Reason)
	default:
		return nil
	}
	var out []Change
	for _, k := range res.Keys {
		if k.Outcome != want {
			continue
		}
		out = append(out, Change{Index: index, Ordinal: uint32(len(out) + 1), Kind: kind, Key: k.Key,
			Size: k.Entry.Size, Owner: k.Entry.Owner, Gen: k.Entry.Gen, Cause: cause})
	}
	return out
}

// Listed is a live key as List reports it.
type Listed struct {
	Key   string
	Size  uint32
	Owner string
	Gen   uint64
}

// List returns every live key and the applied Raft index of the state they were read
// from, under one hold of the read lock: the keys are the state after every command at or
// below applied, and none after. The slice, in no particular order, is the caller's (~48
// bytes per live key; key strings are shared, never changed).
func (f *FSM) List() (keys []Listed, applied uint64) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	keys = make([]Listed, 0, f.st.live.len())
	f.st.live.each(func(e Entry) bool {
		keys = append(keys, Listed{Key: e.Key, Size: e.Size, Owner: e.Owner, Gen: e.Gen})
		return true
	})
	return keys, f.st.applied
}
