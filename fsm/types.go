package fsm

import (
	"fmt"
	"unicode/utf8"

	"github.com/kvoffload/kvoffload"
	"github.com/kvoffload/kvoffload/extent"
)

// TxnID names one transaction: the caller's kvoffload.TxnID, recorded as is. A retry of the
// same batch carries the same TxnID and is de-duplicated by the FSM.
type TxnID = kvoffload.TxnID

// Extent locates a key's bytes inside one bucket file of the owner node: the store's one
// extent type (package extent), the same the bucket store hands out.
type Extent = extent.Extent

// Entry is one committed version of a key: where its bytes are and how to verify them.
type Entry struct {
	Key    string
	Owner  string // node ID holding the bytes
	Extent Extent
	Size   uint32 // payload length in bytes
	Sum    uint64 // xxhash64 of the payload
	Gen    uint64 // generation of this version of the key
	TxnID  TxnID  // transaction that committed it
}

// CommandType is the first byte of every replicated command.
// The values are wire format: never renumber them.
type CommandType uint8

// The replicated commands.
const (
	CmdCommit CommandType = 1
	CmdAbort  CommandType = 2
	CmdRemove CommandType = 3
	CmdMember CommandType = 4
	CmdPrune  CommandType = 5
	// CmdCluster records the cluster's ID (SetCluster).
	CmdCluster CommandType = 6
)

// String returns the command's name.
func (c CommandType) String() string {
	switch c {
	case CmdCommit:
		return "commit"
	case CmdAbort:
		return "abort"
	case CmdRemove:
		return "remove"
	case CmdMember:
		return "member"
	case CmdPrune:
		return "prune"
	case CmdCluster:
		return "cluster"
	}
	return fmt.Sprintf("CommandType(%d)", uint8(c))
}

// Commit makes Entries live. Each entry's TxnID and Owner are taken from the
// command (TxnID, Node); whatever the caller put there is ignored.
type Commit struct {
	TxnID   TxnID
	Node    string
	Entries []Entry
}

// Abort records that a transaction is finished without committing anything.
type Abort struct {
	TxnID  TxnID
	Node   string
	Reason string // at most MaxAbortReason bytes (AbortReason)
}

// MaxAbortReason is the longest Abort.Reason in bytes: the leader refuses a forwarded ABORT
// with a longer one, so a peer cannot grow every replica's Raft log by megabytes per
// command. A coordinator cuts its reasons with AbortReason.
const MaxAbortReason = 1024

// AbortReason returns reason cut to MaxAbortReason bytes, at a UTF-8 boundary.
func AbortReason(reason string) string {
	if len(reason) <= MaxAbortReason {
		return reason
	}
	r := reason[:MaxAbortReason]
	for len(r) > 0 && !utf8.ValidString(r) {
		r = r[:len(r)-1]
	}
	return r
}

// KeyGen names one version of a key. Gen 0 means whatever version is live.
type KeyGen struct {
	Key string
	Gen uint64
}

// Remove deletes keys (metadata first; the owner frees the bytes after apply).
type Remove struct {
	TxnID  TxnID
	Keys   []KeyGen
	Reason string
}

// Member is one node of the cluster as every replica knows it: its raft
// server ID, the address raft dials, the address clients use for the node's
// API, and the address peers use for its Cluster service ("" in records
// written before the peer listener existed: peers then use APIAddr).
type Member struct {
	NodeID   string
	RaftAddr string
	APIAddr  string
	PeerAddr string
}

// PeerTarget is the address peers dial for m's Cluster service.
func (m Member) PeerTarget() string {
	if m.PeerAddr != "" {
		return m.PeerAddr
	}
	return m.APIAddr
}

// SetMember records Member under Member.NodeID (replacing any earlier record),
// or, with Remove, deletes the record of Member.NodeID (the other fields are
// ignored; removing an unknown member is a no-op). NodeID must not be empty.
type SetMember struct {
	TxnID  TxnID
	Member Member
	Remove bool
}

// OwnerStats counts one owner's live entries.
type OwnerStats struct {
	Keys  int
	Bytes int64 // sum of Entry.Size (payload bytes)
}

// Outcome is the per-key result of a command. The values are wire format
// (they are part of snapshots and of Hash): never renumber them.
type Outcome uint8

// The per-key outcomes.
const (
	OutcomeStored        Outcome = iota + 1 // committed by this txn
	OutcomeAlreadyStored                    // key already live with the same Sum and Size
	OutcomeConflict                         // key live with different Sum/Size
	OutcomeStale                            // Gen <= the key's last generation (a remove or newer write came first)
	OutcomeAborted                          // the txn was aborted
	OutcomeRemoved                          // remove: the key was live and is now gone
	OutcomeAbsent                           // remove: nothing live to remove (or Gen did not match)
	OutcomeInvalid                          // commit refused: the extent is out of bounds or overlaps a live entry's (extent.go)
)

// outcomeNames are the outcomes' names, in the snake_case of kvoffload.Outcome's Label: the
// three a KeyResult reports too are spelled by that one table.
var outcomeNames = [...]string{
	OutcomeStored:        kvoffload.Stored.Label(),
	OutcomeAlreadyStored: kvoffload.AlreadyStored.Label(),
	OutcomeConflict:      kvoffload.Conflict.Label(),
	OutcomeStale:         "stale",
	OutcomeAborted:       "aborted",
	OutcomeRemoved:       "removed",
	OutcomeAbsent:        "absent",
	OutcomeInvalid:       "invalid",
}

// String returns the outcome's name ("already_stored"), or "Outcome(N)" for one this build
// does not know.
func (o Outcome) String() string {
	if int(o) < len(outcomeNames) && outcomeNames[o] != "" {
		return outcomeNames[o]
	}
	return fmt.Sprintf("Outcome(%d)", uint8(o))
}

// KeyOutcome is the result for one key of a command. Entry is the live entry
// (Stored, AlreadyStored, Conflict), the removed one (Removed), or zero (Stale, Absent,
// Invalid).
type KeyOutcome struct {
	Key     string
	Outcome Outcome
	Entry   Entry
	// Shared (Removed only): a live entry of the same owner still overlaps Entry.Extent, so
	// the owner must not free those bytes. Derived when the command is applied; not part of
	// snapshots or Hash (a Result read back from a snapshot has it false).
	Shared bool
}

// Result is the recorded outcome of a transaction (a member command's Result
// has Type CmdMember and no Keys). Index is the raft log index
// at which it was first applied; a de-duplicated command returns this Result
// unchanged, so Index and Type may belong to an earlier command.
type Result struct {
	TxnID   TxnID
	Type    CommandType
	Index   uint64
	Aborted bool
	Keys    []KeyOutcome
}

// Stats summarizes the FSM's state.
type Stats struct {
	Keys         int    // live keys
	Bytes        int64  // sum of Size over live keys
	Generations  int    // keys with a generation (live or removed)
	Txns         int    // recorded transaction results
	Members      int    // member records
	AppliedIndex uint64 // highest raft index applied
}

// SetCluster records ID as the cluster's ID, once: the first SetCluster applied sets it, a
// later one with the same ID is a no-op, and one with another ID is refused (its Result is
// Aborted) and changes nothing. The ID is made at bootstrap and checked on every connection
// between nodes (docs/operations.md, "Cluster identity").
type SetCluster struct {
	TxnID TxnID
	ID    string
}

// Prune drops the recorded results of transactions applied at a Raft index below Before, so
// the de-duplication table stays bounded. A retry of a pruned transaction is treated as a new
// one: its keys are found AlreadyStored (or Stale, if removed since), never applied twice.
type Prune struct {
	TxnID  TxnID
	Before uint64
}
