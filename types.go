package kvoffload

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strings"
	"unicode"
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

// outcomeNames spells each outcome once; String and Label derive from it.
var outcomeNames = names{Stored: "Stored", AlreadyStored: "AlreadyStored", Conflict: "Conflict", Rejected: "Rejected", Failed: "Failed"}

var outcomeLabels = outcomeNames.labels()

// String is the outcome's name ("AlreadyStored"), or "Outcome(N)" for one this build does not
// know.
func (o Outcome) String() string { return outcomeNames.name(int(o), "Outcome") }

// Label is the outcome's name in snake_case ("already_stored"): the spelling of metric labels
// and of the FSM's outcomes (fsm.Outcome's String). It is "" for an outcome this build does
// not know.
func (o Outcome) Label() string { return outcomeLabels.name(int(o), "") }

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
//
// A status other than Found names the same fact as a Code (NotFound: CodeNotFound), which
// its result carries too, so that errors.Is matches it; the pairs are written once, in
// getStatuses, and GetStatus.Code reads them.
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

// getStatuses spells each status once and gives the code a result of it carries; String,
// Label and Code derive from it.
var getStatuses = [...]struct {
	name string
	code Code
}{
	Found:       {"Found", CodeNone},
	NotFound:    {"NotFound", CodeNotFound},
	Corrupt:     {"Corrupt", CodeCorrupt},
	Unavailable: {"Unavailable", CodeUnavailable},
	InvalidKey:  {"InvalidKey", CodeInvalidKey},
	ShortBuffer: {"ShortBuffer", CodeShortBuffer},
}

var getStatusNames, getStatusLabels = func() (names, names) {
	n := make(names, len(getStatuses))
	for i, s := range getStatuses {
		n[i] = s.name
	}
	return n, n.labels()
}()

// String is the status's name ("NotFound"), or "GetStatus(N)" for one this build does not
// know.
func (s GetStatus) String() string { return getStatusNames.name(int(s), "GetStatus") }

// Label is the status's name in snake_case ("not_found"), as metric labels spell it; "" for a
// status this build does not know.
func (s GetStatus) Label() string { return getStatusLabels.name(int(s), "") }

// Code is the code a result of status s carries: CodeNone for Found, and for every other
// status the Code of the same name (CodeNotFound for NotFound, ..., CodeUnavailable for
// Unavailable, whose result may carry a more specific one instead: CodeCanceled,
// CodeInternal). A status this build does not know reads as Unavailable: CodeUnavailable.
func (s GetStatus) Code() Code {
	if int(s) < len(getStatuses) && getStatuses[s].name != "" {
		return getStatuses[s].code
	}
	return CodeUnavailable
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
	// Code is why the key was not Found: Status.Code(), or for Unavailable a more specific
	// code (CodeNone when Found).
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

// presenceNames spells each presence once; String and Label derive from it.
var presenceNames = names{Present: "Present", Absent: "Absent", InFlight: "InFlight", Unknown: "Unknown"}

var presenceLabels = presenceNames.labels()

// String is the presence's name ("InFlight"), or "Presence(N)" for one this build does not
// know.
func (p Presence) String() string { return presenceNames.name(int(p), "Presence") }

// Label is the presence's name in snake_case ("in_flight"), as metric labels spell it; "" for
// a presence this build does not know.
func (p Presence) Label() string { return presenceLabels.name(int(p), "") }

// names holds the names of an enumeration's values, by value ("" for a number that names
// none). Each name is CamelCase, as the Go constant is spelled.
type names []string

// name returns the name of value i; for a number that names none, "" when typ is "", else
// "typ(i)".
func (n names) name(i int, typ string) string {
	if i >= 0 && i < len(n) && n[i] != "" {
		return n[i]
	}
	if typ == "" {
		return ""
	}
	return fmt.Sprintf("%s(%d)", typ, i)
}

// labels returns the names in snake_case: "AlreadyStored" is "already_stored".
func (n names) labels() names {
	out := make(names, len(n))
	for i, name := range n {
		var b strings.Builder
		for j, r := range name {
			if unicode.IsUpper(r) && j > 0 {
				b.WriteByte('_')
			}
			b.WriteRune(unicode.ToLower(r))
		}
		out[i] = b.String()
	}
	return out
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
