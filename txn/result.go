package txn

import (
	"github.com/kvoffload/kvoffload"
	"github.com/kvoffload/kvoffload/fsm"
)

// verdict is one key's answer to an offload: its outcome, the code of an outcome that is not
// OK (CodeNone for Stored and AlreadyStored), and the reason in words. Every answer the
// coordinator gives a key is a verdict, made by the values and functions below, and set
// becomes the key's KeyResult.
type verdict struct {
	outcome kvoffload.Outcome
	code    kvoffload.Code
	reason  string
}

// The verdicts of a key that is stored after the call.
var (
	stored        = verdict{outcome: kvoffload.Stored}
	alreadyStored = verdict{outcome: kvoffload.AlreadyStored}
)

// mismatch is the verdict of a key committed with other bytes than the call's.
var mismatch = verdict{kvoffload.Conflict, kvoffload.CodeMismatch, "committed with different bytes"}

// rejected is the verdict of a key refused before anything of it was written.
func rejected(code kvoffload.Code, reason string) verdict {
	return verdict{kvoffload.Rejected, code, reason}
}

// failed is the verdict of a key an error kept from being stored.
func failed(code kvoffload.Code, reason string) verdict {
	return verdict{kvoffload.Failed, code, reason}
}

// set makes v the outcome, code and reason of r: the one place a KeyResult gets them.
func (v verdict) set(r *kvoffload.KeyResult) {
	r.Outcome, r.Code, r.Reason = v.outcome, v.code, v.reason
}

// fromFSM is the verdict of an FSM outcome for a key this transaction proposed.
func fromFSM(o fsm.Outcome) verdict {
	switch o {
	case fsm.OutcomeStored:
		return stored
	case fsm.OutcomeAlreadyStored:
		return alreadyStored
	case fsm.OutcomeConflict:
		return mismatch
	case fsm.OutcomeStale:
		return rejected(kvoffload.CodeStaleGeneration, "stale generation: the key was removed while this offload was in flight")
	case fsm.OutcomeAborted:
		return failed(kvoffload.CodeAborted, "transaction aborted")
	case fsm.OutcomeInvalid:
		return rejected(kvoffload.CodeRefused, "refused by the metadata: the extent is out of bounds or overlaps a live entry's")
	}
	return failed(kvoffload.CodeInternal, "unexpected FSM outcome "+o.String())
}

// fillGetCode completes a read result: Size from a Found value, and for a result without a
// code its status's own (GetStatus.Code).
func fillGetCode(r *kvoffload.GetResult) {
	if r.Status == kvoffload.Found {
		r.Size = len(r.Value)
	}
	if r.Code == kvoffload.CodeNone {
		r.Code = r.Status.Code()
	}
}
