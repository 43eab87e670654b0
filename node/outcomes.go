package node

import (
	"strings"
	"sync"
	"time"

	"github.com/kvoffload/kvoffload"
)

// Label values of the per-key metrics: the vocabulary's own (kvoffload's Label methods,
// snake_case like kvoffload_txn_events_total's kinds), over a fixed set of values each.

func outcomeLabel(o kvoffload.Outcome) string {
	if l := o.Label(); l != "" {
		return l
	}
	return "unspecified"
}

func statusLabel(s kvoffload.GetStatus) string {
	switch s {
	case kvoffload.Found, kvoffload.NotFound, kvoffload.Corrupt:
		return s.Label()
	}
	return kvoffload.Unavailable.Label() // InvalidKey, ShortBuffer and unknown statuses too
}

func presenceLabel(p kvoffload.Presence) string {
	switch p {
	case kvoffload.Present, kvoffload.Absent, kvoffload.InFlight:
		return p.Label()
	}
	return kvoffload.Unknown.Label() // what wire.PresenceToPB sends for any other presence
}

// reasonClass names a class of per-key reasons: a reason containing any of subs.
type reasonClass struct {
	name string
	subs []string
}

// otherReason is the class of a reason no listed class matches.
const otherReason = "other"

// failureKinds lists, per operation and outcome that is not a success, the reason classes of
// kvoffload_key_failures_total, in matching order (the first match wins, else "other"). The
// reasons are the coordinator's (txn/admit.go, plan.go, retry.go, offload.go, join.go,
// resolve.go, read.go) and the owner reads' (owners.go); the set is fixed, so the label stays
// bounded whatever the reasons' text (paths, errno, node IDs) holds.
var failureKinds = []struct {
	op, outcome string
	classes     []reasonClass
}{
	{"offload", kvoffload.Conflict.Label(), []reasonClass{
		{"duplicate_in_batch", []string{"twice with different bytes"}},
		{"different_bytes", []string{"different bytes"}},
	}},
	{"offload", kvoffload.Rejected.Label(), []reasonClass{
		{"invalid_key", []string{"invalid key"}},
		{"invalid_value", []string{"invalid value"}},
		{"too_large", []string{"too large"}},
		{"quota", []string{"quota"}},
		{"back_pressure", []string{"back-pressure"}},
		{"stale_generation", []string{"stale generation"}},
		{"removed_concurrently", []string{"removed concurrently"}},
		{"refused_by_metadata", []string{"refused by the metadata"}},
	}},
	{"offload", kvoffload.Failed.Label(), []reasonClass{
		{"write_error", []string{"write:"}},
		{"data_sync_failed", []string{"data:"}},
		{"wal_error", []string{"wal:"}},
		{"indeterminate", []string{"indeterminate"}},
		{"txn_id_reused", []string{"txn ID already used", "not written by the finished transaction"}},
		{"joined_failed", []string{"joined failed"}},
		{"join_wait", []string{"gave up waiting"}},
		{"aborted", []string{"aborted"}},
		{"reserve_error", []string{"reserve:"}},
	}},
	{"get", kvoffload.Corrupt.Label(), []reasonClass{
		{"corrupt_record", []string{""}},
	}},
	{"get", kvoffload.Unavailable.Label(), []reasonClass{
		{"read_index_failed", []string{"could not be brought up to date"}},
		{"owner_unavailable", []string{"owner", "owned by node"}},
		{"canceled", []string{"context canceled", "deadline exceeded"}},
	}},
}

// reasonClassOf returns the reason class of a key of op with outcome (labels) and reason.
func reasonClassOf(op, outcome, reason string) string {
	for _, fk := range failureKinds {
		if fk.op != op || fk.outcome != outcome {
			continue
		}
		for _, rc := range fk.classes {
			for _, sub := range rc.subs {
				if strings.Contains(reason, sub) {
					return rc.name
				}
			}
		}
	}
	return otherReason
}

// Per-key failure logs: a burst of failureLogBurst lines, then failureLogRate a second; the
// lines left out are counted and the next line logged says how many.
const (
	failureLogRate  = 10
	failureLogBurst = 100
)

// logLimiter is a token bucket for log lines (golang.org/x/time/rate is not a dependency,
// and a log line needs no more than this).
type logLimiter struct {
	mu      sync.Mutex
	rate    float64 // tokens a second
	burst   float64
	tokens  float64
	last    time.Time
	dropped int
}

func newLogLimiter(rate, burst float64) *logLimiter {
	return &logLimiter{rate: rate, burst: burst, tokens: burst, last: time.Now()}
}

// allow reports whether a line may be logged now and, if so, how many were refused since
// the last one allowed.
func (l *logLimiter) allow() (ok bool, dropped int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := time.Now()
	l.tokens = min(l.burst, l.tokens+now.Sub(l.last).Seconds()*l.rate)
	l.last = now
	if l.tokens < 1 {
		l.dropped++
		return false, 0
	}
	l.tokens--
	dropped, l.dropped = l.dropped, 0
	return true, dropped
}
