package sim

import (
	"fmt"
	"maps"
	"slices"
)

// keyState is what the model knows of a key.
type keyState uint8

const (
	absent    keyState = iota // its last acknowledged operation removed it, or none stored it
	present                   // its last acknowledged operation stored it
	uncertain                 // an operation on it failed or was cut off: either is right
	damaged                   // stored, then a bit of its record flipped at rest
)

func (s keyState) String() string {
	return [...]string{"absent", "present", "uncertain", "damaged"}[s]
}

// model is what the workload was told: each key's state, and the keys of the operation in
// flight. Guarded by its world's disk.mu.
type model struct {
	keys     map[string]keyState
	inflight map[string]bool
	// decided counts the operations that ended on each key: a retried offload's answer is
	// its first attempt's, older than any operation that ended on the key since.
	decided map[string]int
}

func newModel() *model {
	return &model{keys: map[string]keyState{}, inflight: map[string]bool{}, decided: map[string]int{}}
}

// afterCrash is the model a power loss leaves: the operation in flight ends as failed (fail),
// its keys uncertain.
func (m *model) afterCrash() *model {
	c := &model{keys: maps.Clone(m.keys), inflight: map[string]bool{}, decided: maps.Clone(m.decided)}
	c.fail(slices.Collect(maps.Keys(m.inflight)))
	return c
}

// begin marks keys in flight.
func (m *model) begin(keys []string) {
	for _, k := range keys {
		m.inflight[k] = true
	}
}

// fail ends an operation whose outcome is unknown: its keys become uncertain.
func (m *model) fail(keys []string) {
	for _, k := range keys {
		m.keys[k] = uncertain
		delete(m.inflight, k)
		m.decided[k]++
	}
}

// end ends an operation with its keys' new states.
func (m *model) end(keys []string, states []keyState) {
	for i, k := range keys {
		m.keys[k] = states[i]
		delete(m.inflight, k)
		m.decided[k]++
	}
}

// violation is an invariant broken: which, of what key, and how.
type violation struct {
	inv, key, what string
}

func (v violation) Error() string { return fmt.Sprintf("%s: %s: %s", v.inv, v.key, v.what) }
