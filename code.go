package kvoffload

import (
	"fmt"
	"strconv"
)

// Code is the machine-readable reason of a per-key result: why a key was Rejected, Failed,
// Conflict, not Found or Unavailable. It is an error, so a result's Err matches it with
// errors.Is:
//
//	errors.Is(r.Err(), kvoffload.CodeQuota)
//
// The values are wire format (the protocol's Code enum has the same numbers): never renumber
// them. A code the caller's build does not know reads as itself (String "Code(N)").
type Code uint8

// The codes. Each says what the caller may do next.
const (
	// CodeNone: the key is stored or found.
	CodeNone Code = iota
	// CodeInvalidKey: the key can never be stored: empty, over the store's MaxKeyBytes, not
	// UTF-8, or holding a control character (CheckKey). Rejected; never retry it.
	CodeInvalidKey
	// CodeInvalidValue: the value can never be stored as it is: it is empty, or it changed
	// while the call was writing it (a value must not be modified until the call returns).
	// Rejected; never retry it as it is.
	CodeInvalidValue
	// CodeTooLarge: the value is over the store's MaxObjectBytes (the Reason names the limit
	// and its value). Rejected; never retry it on this store.
	CodeTooLarge
	// CodeQuota: storing the value would exceed the store's capacity and eviction could not
	// make room. Rejected; retry after space is freed.
	CodeQuota
	// CodeBackPressure: the store had no room in flight for the batch before its deadline.
	// Rejected; retry later (under a fresh TxnID).
	CodeBackPressure
	// CodeStaleGeneration: the key was removed while this offload was in flight, so the
	// offload was not applied over the removal. Rejected; offload again if it is still wanted.
	CodeStaleGeneration
	// CodeAborted: the transaction was rolled back (nothing of it is stored). Failed; resend
	// under a fresh TxnID.
	CodeAborted
	// CodeTxnIDReused: the TxnID names a finished transaction that did not write this key.
	// Failed; resend it under a fresh TxnID.
	CodeTxnIDReused
	// CodeMismatch: the key is committed with different bytes (checksum or size). Conflict;
	// the stored bytes stay. Usually two producers chose the same key for different blocks
	// (a key that forgot the model or the dtype).
	CodeMismatch
	// CodeDuplicateKey: the batch holds the key twice with different bytes. Conflict.
	CodeDuplicateKey
	// CodeRefused: the metadata refused the commit (an extent out of bounds or overlapping,
	// or this member is no longer in the cluster). Rejected or Failed; resend under a fresh
	// TxnID, to another member.
	CodeRefused
	// CodeIO: writing or syncing the data failed on the member's disk. Failed; resend under a
	// fresh TxnID (the member may have failed its disk).
	CodeIO
	// CodeCanceled: the call's context ended while this key waited (for another transaction
	// writing it, or for the metadata). Failed or Unavailable; retry.
	CodeCanceled
	// CodeUnavailable: the bytes or the metadata could not be reached now (the owning member
	// is down, the leader could not confirm). Unavailable; retry later.
	CodeUnavailable
	// CodeNotFound: no committed record for the key. NotFound.
	CodeNotFound
	// CodeCorrupt: the record failed verification and was dropped. Corrupt; offload again.
	CodeCorrupt
	// CodeShortBuffer: the caller's buffer is smaller than the value (GetResult.Size).
	// ShortBuffer; retry with a buffer of Size bytes.
	CodeShortBuffer
	// CodeInternal: a result the store did not expect (a bug). Failed or Unavailable.
	CodeInternal
	// CodeNoSpace: the member's data filesystem has no room for the value above the reserve
	// it keeps for its WAL and Raft log (the Reason names the free bytes and the reserve).
	// Rejected at admission, before anything is written; retry after space is freed (Remove,
	// eviction), or on another member.
	CodeNoSpace
)

var codeNames = [...]string{
	CodeNone:            "none",
	CodeInvalidKey:      "invalid key",
	CodeInvalidValue:    "invalid value",
	CodeTooLarge:        "too large",
	CodeQuota:           "quota",
	CodeBackPressure:    "back-pressure",
	CodeStaleGeneration: "stale generation",
	CodeAborted:         "aborted",
	CodeTxnIDReused:     "txn ID reused",
	CodeMismatch:        "committed with different bytes",
	CodeDuplicateKey:    "duplicate key",
	CodeRefused:         "refused",
	CodeIO:              "I/O error",
	CodeCanceled:        "canceled",
	CodeUnavailable:     "unavailable",
	CodeNotFound:        "not found",
	CodeCorrupt:         "corrupt",
	CodeShortBuffer:     "short buffer",
	CodeInternal:        "internal",
	CodeNoSpace:         "no space",
}

// String is the code's name in words ("quota", "back-pressure").
func (c Code) String() string {
	if int(c) < len(codeNames) {
		return codeNames[c]
	}
	return "Code(" + strconv.Itoa(int(c)) + ")"
}

// Error makes a Code an error, so errors.Is can match a result's Err against it; it is the
// code's name.
func (c Code) Error() string { return c.String() }

// KeyError is the error of one key's result (KeyResult.Err, GetResult.Err). It unwraps to its
// Code.
type KeyError struct {
	Key    string
	What   string // the outcome or status: "Rejected", "Failed", "Conflict", "NotFound", ...
	Code   Code
	Reason string
}

func (e *KeyError) Error() string {
	if e.Reason == "" {
		return fmt.Sprintf("key %q: %s (%s)", e.Key, e.What, e.Code)
	}
	return fmt.Sprintf("key %q: %s (%s): %s", e.Key, e.What, e.Code, e.Reason)
}

// Unwrap returns the Code.
func (e *KeyError) Unwrap() error { return e.Code }
