package client

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"unicode/utf8"
)

// TxnID names one transaction (a batch offload). A retry with the same TxnID is answered with
// the original results.
type TxnID [16]byte

// NewTxnID returns a random TxnID (crypto/rand).
func NewTxnID() TxnID {
	var id TxnID
	if _, err := rand.Read(id[:]); err != nil {
		panic("client: crypto/rand failed: " + err.Error()) // never returns an error on supported platforms
	}
	return id
}

// String is the ID in hex.
func (id TxnID) String() string { return hex.EncodeToString(id[:]) }

// Object is one key and its payload in a batch offload.
type Object struct {
	Key   string
	Value []byte
}

// Outcome is the final state of one key of a batch offload.
type Outcome int

const (
	// Stored: this transaction committed the key.
	Stored Outcome = iota + 1
	// AlreadyStored: the key was already committed with the same bytes.
	AlreadyStored
	// Conflict: the key is committed with different bytes.
	Conflict
	// Rejected: the key was refused before anything was written (Reason says why). A key
	// that is not valid UTF-8 is Rejected by the client itself and never sent (the protocol's
	// keys are proto3 strings, which must be UTF-8).
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

// KeyResult is the outcome for one object of a batch, in input order.
type KeyResult struct {
	Key     string
	Outcome Outcome
	// Joined: the key was in flight in another transaction and this one waited for it.
	Joined bool
	Reason string
}

// GetStatus is the outcome of reading one key.
type GetStatus int

const (
	Found       GetStatus = iota + 1 // Value holds the verified bytes
	NotFound                         // no committed record for the key
	Corrupt                          // the record failed verification
	Unavailable                      // the bytes could not be served now (Reason says why)
	// InvalidKey: the key can never name an object (it is not valid UTF-8): the client
	// answered for it without sending it, and Reason says why.
	InvalidKey
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
	}
	return "Unknown"
}

// GetResult is the outcome of reading one key, in request order.
type GetResult struct {
	Key    string
	Status GetStatus
	Value  []byte
	Reason string
}

// Presence is what BatchExists reports for a key.
type Presence int

const (
	Present  Presence = iota + 1 // committed and readable
	Absent                       // not committed (or not valid UTF-8, so never storable)
	InFlight                     // being written by a transaction that has not finished
	// Unknown: the member could not confirm the key's state (its read index through the
	// leader failed); neither "stored" nor "not stored" is claimed. ExistsResult.Reason says
	// why. An answer the client does not recognize is Unknown too.
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
	return fmt.Sprintf("Presence(%d)", int(p))
}

// ExistsResult answers BatchExists: one Presence per key, in request order, and the number of
// leading Present keys (the prefix-cache hit length in blocks): the count stops at the first
// key that is not Present, Unknown included.
type ExistsResult struct {
	Keys          []Presence
	PrefixPresent int
	// Reason says why keys are Unknown, when some are.
	Reason string
}

// invalidKeyReason is the Reason of a key the client does not send.
const invalidKeyReason = "invalid key: not valid UTF-8 (the protocol's keys are strings); not sent"

// sendable reports whether key can travel in the protocol's string fields.
func sendable(key string) bool { return utf8.ValidString(key) }

// self is the key of a key (for sendOnly).
func self(k string) string { return k }
