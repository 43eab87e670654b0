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
		c.awaitJoin(ctx, j, r.Key).set(r)
	}
}

// awaitJoin waits for the transaction writing key, which j joined, and returns key's verdict.
func (c *Coordinator) awaitJoin(ctx context.Context, j joinRef, key string) verdict {
	select {
	case <-j.fl.done:
	case <-ctx.Done():
		return failed(kvoffload.CodeCanceled, "gave up waiting for the in-flight offload of this key: "+ctx.Err().Error())
	}
	if e, ok := c.meta.Lookup(key); ok {
		return compare(e, j.sum, j.size)
	}
	theirs := j.fl.v
	switch {
	case theirs.outcome.OK():
		return rejected(kvoffload.CodeStaleGeneration, "stored by the in-flight offload this call joined, then removed concurrently")
	case theirs.code == kvoffload.CodeInvalidValue && theirs.outcome == kvoffload.Rejected:
		// The joined caller's own value changed during its call: this caller's bytes may be
		// sound, so it is told to resend, not that its value can never be stored.
		return failed(kvoffload.CodeAborted,
			"the in-flight offload this key joined did not store it (that caller's value changed during its call); resend it")
	}
	return failed(theirs.code, "the in-flight offload this key joined failed: "+theirs.reason)
}
