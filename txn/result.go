package txn

import (
	"fmt"

	"github.com/kvoffload/kvoffload/fsm"
)

// Outcome is the final state of one key of a batch offload.
type Outcome uint8

const (
	// Stored: this transaction committed the key.
	Stored Outcome = iota + 1
	// AlreadyStored: the key was already committed with the same bytes (by an earlier
	// transaction, a concurrent one this call joined, or earlier in the same batch).
	AlreadyStored
	// Conflict: the key is committed with different bytes (checksum or size differ).
	Conflict
	// Rejected: the key was refused before anything was written (Reason says why: invalid key,
	// too large, quota, stale generation).
	Rejected
	// Failed: an error stopped the transaction (Reason says which); the key is not stored.
	Failed
)

func (o Outcome) String() string {
	switch o {
	case Stored:
		return "Stored"
	case AlreadyStored:
		return "AlreadyStored"
	case Conflict:
		return "Conflict"
	case Rejected:
		return "Rejected"
	case Failed:
		return "Failed"
	}
	return "Unknown"
}

// OK reports whether the key is stored after the call (Stored or AlreadyStored).
func (o Outcome) OK() bool { return o == Stored || o == AlreadyStored }

// Object is one key and its payload in a batch offload.
type Object struct {
	Key   string
	Value []byte
}

// KeyResult is the outcome for one object of a batch, in input order.
type KeyResult struct {
	Key     string
	Outcome Outcome
	// Joined is true when the key was in flight in another transaction and this call waited
	// for it (single-flight) instead of writing it again.
	Joined bool
	Reason string
}

// GetStatus is the outcome of reading one key.
type GetStatus uint8

const (
	Found       GetStatus = iota + 1 // Value holds the verified bytes
	NotFound                         // no committed record for the key
	Corrupt                          // the record failed verification; the key has been removed from metadata
	Unavailable                      // the bytes live on another node that cannot serve them now
)

func (s GetStatus) String() string {
	switch s {
	case Found:
		return "Found"
	case NotFound:
		return "NotFound"
	case Corrupt:
		return "Corrupt"
	case Unavailable:
		return "Unavailable"
	}
	return "Unknown"
}

// GetResult is the outcome of reading one key.
type GetResult struct {
	Key    string
	Status GetStatus
	Value  []byte
	Reason string
}

// Presence is what BatchExists reports for a key.
type Presence uint8

const (
	Present  Presence = iota + 1 // committed and readable
	Absent                       // not committed (confirmed against the leader in a cluster)
	InFlight                     // being written by a transaction that has not finished
	// Unknown: the node could not confirm the key's state (its read index failed or timed
	// out), so it claims neither "stored" nor "not stored"; ExistsResult.Reason says why.
	Unknown
)

func (p Presence) String() string {
	switch p {
	case Present:
		return "Present"
	case Absent:
		return "Absent"
	case InFlight:
		return "InFlight"
	case Unknown:
		return "Unknown"
	}
	return fmt.Sprintf("Presence(%d)", uint8(p))
}

// ExistsResult answers BatchExists: one Presence per key, in input order, and the number of
// leading Present keys (the prefix-cache hit length in blocks; it stops at the first key
// that is not Present, Unknown included).
type ExistsResult struct {
	Keys          []Presence
	PrefixPresent int
	// Reason says why keys are Unknown (empty when none is).
	Reason string
}

// RemoveResult says whether a key was removed (false: it was not committed).
type RemoveResult struct {
	Key     string
	Removed bool
}

// fromFSM maps an FSM outcome for a key this transaction proposed.
func fromFSM(o fsm.Outcome) (Outcome, string) {
	switch o {
	case fsm.OutcomeStored:
		return Stored, ""
	case fsm.OutcomeAlreadyStored:
		return AlreadyStored, ""
	case fsm.OutcomeConflict:
		return Conflict, "committed with different bytes"
	case fsm.OutcomeStale:
		return Rejected, "stale generation: the key was removed while this offload was in flight"
	case fsm.OutcomeAborted:
		return Failed, "transaction aborted"
	case fsm.OutcomeInvalid:
		return Rejected, "refused by the metadata: the extent is out of bounds or overlaps a live entry's"
	}
	return Failed, "unexpected FSM outcome " + o.String()
}
