package txn

import (
	"github.com/kvoffload/kvoffload"
	"github.com/kvoffload/kvoffload/fsm"
)

// fromFSM maps an FSM outcome for a key this transaction proposed.
func fromFSM(o fsm.Outcome) (kvoffload.Outcome, kvoffload.Code, string) {
	switch o {
	case fsm.OutcomeStored:
		return kvoffload.Stored, kvoffload.CodeNone, ""
	case fsm.OutcomeAlreadyStored:
		return kvoffload.AlreadyStored, kvoffload.CodeNone, ""
	case fsm.OutcomeConflict:
		return kvoffload.Conflict, kvoffload.CodeMismatch, "committed with different bytes"
	case fsm.OutcomeStale:
		return kvoffload.Rejected, kvoffload.CodeStaleGeneration, "stale generation: the key was removed while this offload was in flight"
	case fsm.OutcomeAborted:
		return kvoffload.Failed, kvoffload.CodeAborted, "transaction aborted"
	case fsm.OutcomeInvalid:
		return kvoffload.Rejected, kvoffload.CodeRefused, "refused by the metadata: the extent is out of bounds or overlaps a live entry's"
	}
	return kvoffload.Failed, kvoffload.CodeInternal, "unexpected FSM outcome " + o.String()
}

// fillGetCode completes a read result: Size from a Found value, and for a status without a
// code the status's own (NotFound: CodeNotFound, Corrupt: CodeCorrupt, Unavailable:
// CodeUnavailable).
func fillGetCode(r *kvoffload.GetResult) {
	if r.Status == kvoffload.Found {
		r.Size = len(r.Value)
	}
	if r.Code != kvoffload.CodeNone || r.Status == kvoffload.Found {
		return
	}
	switch r.Status {
	case kvoffload.NotFound:
		r.Code = kvoffload.CodeNotFound
	case kvoffload.Corrupt:
		r.Code = kvoffload.CodeCorrupt
	case kvoffload.InvalidKey:
		r.Code = kvoffload.CodeInvalidKey
	case kvoffload.ShortBuffer:
		r.Code = kvoffload.CodeShortBuffer
	default:
		r.Code = kvoffload.CodeUnavailable
	}
}
