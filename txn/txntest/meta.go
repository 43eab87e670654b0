// Package txntest holds the test double of txn's Meta seam (txn/seams.go): a single replica
// over a real fsm.FSM, with a knob that loses proposals. The tests of txn build their special
// doubles on it by embedding *Meta and overriding the methods whose behaviour they change.
// Only _test.go files and chaos import it (internal/lint's TestImportRules); it imports fsm
// and not txn, so txn's own tests may use it.
package txntest

import (
	"context"
	"errors"
	"sync/atomic"

	"github.com/kvoffload/kvoffload/fsm"
)

// ErrLost is the error of a proposal Meta loses: indeterminate, as when leadership is lost
// before the answer arrives.
var ErrLost = errors.New("txntest: leadership lost")

// Meta is a txn.Meta that is its own only replica: Propose applies the command to FSM at the
// next log index before it returns, Barrier and ReadIndex return at once, and the reads are
// FSM's. It does not offer LookupEach (the batch lookup node's Meta has). Safe for concurrent
// use; ApplyAnyway is set before the first Propose.
type Meta struct {
	FSM *fsm.FSM
	// ApplyAnyway applies a proposal that FailNext loses all the same: its answer is lost, not
	// the command.
	ApplyAnyway bool

	index    atomic.Uint64 // the last log index applied
	failNext atomic.Int64  // proposals still to lose
}

// NewMeta returns a Meta over a fresh FSM.
func NewMeta() *Meta { return &Meta{FSM: fsm.New()} }

// FailNext makes the next n proposals fail with ErrLost (applied or not, as ApplyAnyway
// says); 0 ends that.
func (m *Meta) FailNext(n int64) { m.failNext.Store(n) }

// Apply applies cmd to FSM at the next log index whatever FailNext says: a command another
// node proposed, or one applied behind the coordinator's back.
func (m *Meta) Apply(cmd []byte) *fsm.Result { return m.FSM.ApplyCommand(m.NextIndex(), cmd) }

// NextIndex takes the next log index for a command applied elsewhere (another replica's FSM,
// whose snapshot this one restores later).
func (m *Meta) NextIndex() uint64 { return m.index.Add(1) }

// LastIndex returns the last log index Apply, Propose or NextIndex took.
func (m *Meta) LastIndex() uint64 { return m.index.Load() }

// Propose applies cmd and returns its result, or loses it (FailNext).
func (m *Meta) Propose(_ context.Context, cmd []byte) (*fsm.Result, error) {
	if m.failNext.Add(-1) >= 0 {
		if m.ApplyAnyway {
			m.Apply(cmd)
		}
		return nil, ErrLost
	}
	return m.Apply(cmd), nil
}

func (m *Meta) Barrier(context.Context) error              { return nil }
func (m *Meta) ReadIndex(context.Context) error            { return nil }
func (m *Meta) Lookup(k string) (fsm.Entry, bool)          { return m.FSM.Lookup(k) }
func (m *Meta) Generation(k string) uint64                 { return m.FSM.Generation(k) }
func (m *Meta) TxnResult(id fsm.TxnID) (*fsm.Result, bool) { return m.FSM.TxnResult(id) }
func (m *Meta) LiveOf(owner string) []fsm.Entry            { return m.FSM.LiveOf(owner) }
