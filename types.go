package kvoffload

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
)

// TxnID names one transaction (a batch offload): 128 bits the caller chooses, normally with
// NewTxnID. A retry with the same TxnID is answered with the original results, so a batch
// whose outcome was unknown takes effect exactly once. The zero TxnID is refused
// (ErrInvalidArgument): every caller that forgot NewTxnID would share it.
type TxnID [16]byte

// NewTxnID returns a random TxnID (crypto/rand).
func NewTxnID() TxnID {
	var id TxnID
	if _, err := rand.Read(id[:]); err != nil {
		panic("kvoffload: crypto/rand failed: " + err.Error()) // never fails on supported platforms
	}
	return id
}

// String is the ID in lower-case hex (32 characters).
func (id TxnID) String() string { return hex.EncodeToString(id[:]) }

// IsZero reports whether id is the zero TxnID.
func (id TxnID) IsZero() bool { return id == TxnID{} }

// Object is one key and its payload in a batch offload. Key is 1 to MaxKeyBytes bytes of UTF-8
// without control characters (CheckKey); Value is 1 byte up to the store's object limit.
type Object struct {
	Key   string
	Value []byte
}

// Outcome is the final state of one key of a batch offload.
type Outcome uint8

// The outcomes of BatchOffload, per key. The values are wire format (the protocol's Outcome
// enum has the same numbers): never renumber them.
const (
	// Stored: this transaction committed the key.
	Stored Outcome = iota + 1
	// AlreadyStored: the key was already committed with the same bytes (by an earlier
	// transaction, a concurrent one this call joined, or earlier in the same batch).
	AlreadyStored
	// Conflict: the key is committed with different bytes (Code CodeMismatch), or the batch
	// holds it twice with different bytes (CodeDuplicateKey). Nothing was changed.
	Conflict
	// Rejected: the key was refused before anything was written; Code says why. Resending the
	// same object cannot succeed until what the Code names changes (quota, back-pressure,
	// stale generation), or ever (invalid key or value, too large).
	Rejected
	// Failed: an error stopped the transaction; Code says which. The key is not stored.
	// CodeAborted: resend under a fresh TxnID. Otherwise resend under the same TxnID while
	// the call's outcome is in doubt, or a fresh one once the call returned.
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
	return fmt.Sprintf("Outcome(%d)", uint8(o))
}

// OK reports whether the key is stored after the call (Stored or AlreadyStored).
func (o Outcome) OK() bool { return o == Stored || o == AlreadyStored }

// KeyResult is the outcome for one object of a batch, in input order.
type KeyResult struct {
	Key     string
	Outcome Outcome
	// Joined: the key was in flight in another transaction and this one waited for it
	// (single-flight) instead of writing it again.
	Joined bool
	// Code is why the key is not stored (CodeNone when Outcome.OK()).
	Code Code
	// Reason is Code in words, with the details (sizes, limits, the underlying error).
	Reason string
}

// Err is nil when the key is stored, else a *KeyError that matches r.Code with errors.Is.
func (r KeyResult) Err() error {
	if r.Outcome.OK() {
		return nil
	}
	return &KeyError{Key: r.Key, Code: r.Code, Reason: r.Reason, What: r.Outcome.String()}
}

// GetStatus is the outcome of reading one key.
type GetStatus uint8

// The statuses of BatchGet, per key. The values are wire format (the protocol's GetStatus
// enum has the same numbers, InvalidKey and ShortBuffer excepted: they never travel).
const (
	// Found: Value holds the verified bytes.
	Found GetStatus = iota + 1
	// NotFound: no committed record for the key.
	NotFound
	// Corrupt: the record failed verification and the key has been dropped from the
	// metadata: offload it again.
	Corrupt
	// Unavailable: the bytes could not be served now (Code and Reason say why: the owning
	// member is down, the metadata could not be confirmed with the leader); retry later.
	Unavailable
	// InvalidKey: the key can never name an object (CheckKey refuses it); it was not looked up.
	InvalidKey
	// ShortBuffer: BatchGetInto's buffer for the key is smaller than its value, whose length
	// is in Size. The buffer is left as it was.
	ShortBuffer
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
	case InvalidKey:
		return "InvalidKey"
	case ShortBuffer:
		return "ShortBuffer"
	}
	return fmt.Sprintf("GetStatus(%d)", uint8(s))
}

// GetResult is the outcome of reading one key, in request order.
type GetResult struct {
	Key    string
	Status GetStatus
	// Value holds the verified bytes when Status is Found. BatchGet allocates it; BatchGetInto
	// makes it a prefix of the caller's buffer.
	Value []byte
	// Size is the value's length in bytes when Found or ShortBuffer, else 0.
	Size int
	// Code is why the key was not Found (CodeNone when Found; CodeNotFound when NotFound).
	Code Code
	// Reason is Code in words, with the details.
	Reason string
}

// Err is nil when the key was Found, else a *KeyError that matches r.Code with errors.Is.
func (r GetResult) Err() error {
	if r.Status == Found {
		return nil
	}
	return &KeyError{Key: r.Key, Code: r.Code, Reason: r.Reason, What: r.Status.String()}
}

// Presence is what BatchExists reports for a key.
type Presence uint8

// The presences of BatchExists, per key. The values are wire format (the protocol's Presence
// enum has the same numbers): never renumber them.
const (
	Present  Presence = iota + 1 // committed and readable
	Absent                       // not committed (confirmed against the leader in a cluster)
	InFlight                     // being written by a transaction that has not finished
	// Unknown: the store could not confirm the key's state (its read index through the
	// leader failed or timed out), so it claims neither "stored" nor "not stored";
	// ExistsResult.Reason says why. An answer the caller's build does not know is Unknown too.
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

// ExistsResult answers BatchExists: one Presence per key, in request order, and the number of
// leading Present keys (the prefix-cache hit length in blocks; it stops at the first key that
// is not Present, Unknown included).
type ExistsResult struct {
	Keys          []Presence
	PrefixPresent int
	// Reason says why keys are Unknown (empty when none is).
	Reason string
}

// LeadingPresent counts the Present keys at the start of ps.
func LeadingPresent(ps []Presence) int {
	n := 0
	for n < len(ps) && ps[n] == Present {
		n++
	}
	return n
}

// RemoveResult says whether a key was removed (false: it was not committed, or CheckKey
// refuses it).
type RemoveResult struct {
	Key     string
	Removed bool
}

// Stats is a point-in-time view of the store as the member answering sees it.
type Stats struct {
	NodeID string
	// Keys and Bytes are the live keys and payload bytes in the (cluster) metadata.
	Keys, Bytes uint64
	// LocalKeys and LocalBytes are the keys and payload bytes whose records this member holds.
	LocalKeys, LocalBytes uint64
	// LiveBytes is the bucket space held by live records on this member (records padded to
	// 4 KiB); AllocatedBytes is the space its bucket files take on disk, in bytes.
	LiveBytes, AllocatedBytes int64
	// Counters are the member's event counters since start-up, by name (txns, stored,
	// already_stored, joined, conflicts, rejected, failed, waits, aborts, gets, get_corrupt,
	// removed).
	Counters map[string]uint64
}
