package txn

import (
	"context"

	"github.com/kvoffload/kvoffload"
)

// awaitJoins waits for the transactions this one joined and reports their outcome.
func (c *Coordinator) awaitJoins(ctx context.Context, p *plan) {
	for _, j := range p.joins {
		r := &p.results[j.idx]
		r.Joined = true
		select {
		case <-j.fl.done:
		case <-ctx.Done():
			r.Outcome, r.Code, r.Reason = kvoffload.Failed, kvoffload.CodeCanceled, "gave up waiting for the in-flight offload of this key: "+ctx.Err().Error()
			continue
		}
		if e, ok := c.meta.Lookup(r.Key); ok {
			r.Outcome, r.Code, r.Reason = compare(e, j.sum, j.size)
			continue
		}
		if j.fl.outcome.OK() {
			r.Outcome, r.Code, r.Reason = kvoffload.Rejected, kvoffload.CodeStaleGeneration, "stored by the in-flight offload this call joined, then removed concurrently"
			continue
		}
		if j.fl.code == kvoffload.CodeInvalidValue && j.fl.outcome == kvoffload.Rejected {
			// The joined caller's own value changed during its call: this caller's bytes may
			// be sound, so it is told to resend, not that its value can never be stored.
			r.Outcome, r.Code, r.Reason = kvoffload.Failed, kvoffload.CodeAborted,
				"the in-flight offload this key joined did not store it (that caller's value changed during its call); resend it"
			continue
		}
		r.Outcome, r.Code, r.Reason = kvoffload.Failed, j.fl.code, "the in-flight offload this key joined failed: "+j.fl.reason
	}
}
