package raftmeta

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"github.com/kvoffload/kvoffload/fsm"
	"github.com/kvoffload/kvoffload/third_party/raft"
)

// storesMember is one member on supplied stores: its log, stable and snapshot stores outlive
// the Node, as a simulator's survive a restart.
type storesMember struct {
	id    string
	logs  *raft.InmemStore
	snaps *raft.InmemSnapshotStore
	trans *raft.InmemTransport
	node  *Node
	f     *fsm.FSM
}

// openStoresMember opens m on its stores with a fresh transport and FSM, connected both
// ways to the transports of others.
func openStoresMember(t *testing.T, m *storesMember, bootstrap bool, others ...*storesMember) {
	t.Helper()
	_, m.trans = raft.NewInmemTransport(raft.ServerAddress(m.id))
	for _, o := range others {
		if o.node != nil {
			m.trans.Connect(o.trans.LocalAddr(), o.trans)
			o.trans.Connect(m.trans.LocalAddr(), m.trans)
		}
	}
	cfg := testConfig(t, m.id, "")
	cfg.Bootstrap = bootstrap
	cfg.Stores = &Stores{Log: m.logs, Stable: m.logs, Snapshots: m.snaps, Transport: m.trans}
	m.f = fsm.New()
	var err error
	if m.node, err = Open(cfg, m.f); err != nil {
		t.Fatalf("Open %s on supplied stores: %v", m.id, err)
	}
}

// TestSuppliedStores: a cluster of three on supplied in-memory stores and transports (no
// Dir) replicates a proposal to every FSM; a member closed and reopened on the same stores
// has its state and catches up with what was committed while it was down.
func TestSuppliedStores(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		ms := make([]*storesMember, 3)
		for i := range ms {
			ms[i] = &storesMember{id: fmt.Sprintf("m%d", i), logs: raft.NewInmemStore(), snaps: raft.NewInmemSnapshotStore()}
		}
		openStoresMember(t, ms[0], true)
		mustLead(t, ms[0].node)
		for _, m := range ms[1:] {
			openStoresMember(t, m, false, ms...)
			if _, err := ms[0].node.AddMember(ctx, m.id, m.id); err != nil {
				t.Fatalf("AddMember %s: %v", m.id, err)
			}
		}
		mustPropose(t, ms[0].node, commitCmd(1, "k1", 11))
		want := ms[0].f.AppliedIndex()
		for _, m := range ms {
			waitApplied(t, ctx, m, want)
		}

		if err := ms[2].node.Close(); err != nil {
			t.Fatalf("Close m2: %v", err)
		}
		mustPropose(t, ms[0].node, commitCmd(2, "k2", 22))
		openStoresMember(t, ms[2], false, ms[:2]...)
		if !ms[2].node.HasState() {
			t.Fatal("m2 reopened on its stores has no Raft state")
		}
		want = ms[0].f.AppliedIndex()
		waitApplied(t, ctx, ms[2], want)
		for _, k := range []string{"k1", "k2"} {
			if _, ok := ms[2].f.Lookup(k); !ok {
				t.Errorf("m2 after a restart on its stores: %s missing", k)
			}
		}
		if h, h0 := ms[2].f.Hash(), ms[0].f.Hash(); h != h0 {
			t.Errorf("m2's FSM hash %x, the leader's %x, both at index %d", h, h0, want)
		}
		for _, m := range ms {
			if err := m.node.Close(); err != nil {
				t.Errorf("Close %s: %v", m.id, err)
			}
		}
	})
}

func waitApplied(t *testing.T, ctx context.Context, m *storesMember, index uint64) {
	t.Helper()
	if err := m.node.WaitApplied(ctx, index); err != nil {
		t.Fatalf("%s: %v", m.id, err)
	}
}

// failingLog is a log store whose writes fail once fail is set.
type failingLog struct {
	*raft.InmemStore
	fail error
}

func (l *failingLog) StoreLogs(logs []*raft.Log) error {
	if l.fail != nil {
		return l.fail
	}
	return l.InmemStore.StoreLogs(logs)
}

func (l *failingLog) StoreLog(e *raft.Log) error { return l.StoreLogs([]*raft.Log{e}) }

// TestSuppliedStoreFault: a write error of a supplied log store is a log fault as raft.db's
// is: LogFault wraps ErrLogWrite and the error, OnLogFault hears it, and Raft stops.
func TestSuppliedStoreFault(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		logs := &failingLog{InmemStore: raft.NewInmemStore()}
		_, trans := raft.NewInmemTransport("a")
		cfg := testConfig(t, "a", "")
		heard := make(chan error, 1)
		cfg.OnLogFault = func(err error) { heard <- err }
		cfg.Stores = &Stores{Log: logs, Stable: logs.InmemStore, Snapshots: raft.NewInmemSnapshotStore(), Transport: trans}
		n, err := Open(cfg, fsm.New())
		if err != nil {
			t.Fatalf("Open: %v", err)
		}
		defer n.Close()
		mustLead(t, n)
		injected := errors.New("disk gone")
		logs.fail = injected
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if _, err := n.Propose(ctx, commitCmd(1, "k", 1)); err == nil {
			t.Fatal("Propose on a log that cannot be written succeeded")
		}
		got := <-heard
		if !errors.Is(got, ErrLogWrite) || !errors.Is(got, injected) || !errors.Is(n.LogFault(), ErrLogWrite) {
			t.Fatalf("OnLogFault heard %v, LogFault %v; want ErrLogWrite wrapping %v", got, n.LogFault(), injected)
		}
		synctest.Wait()
		if st := n.Raft().State(); st != raft.Shutdown {
			t.Fatalf("Raft state after a log fault: %v, want Shutdown", st)
		}
	})
}

// TestSuppliedStoresValidate: Stores need every field and no BindAddr, and make Dir
// optional.
func TestSuppliedStoresValidate(t *testing.T) {
	_, trans := raft.NewInmemTransport("a")
	full := &Stores{Log: raft.NewInmemStore(), Stable: raft.NewInmemStore(), Snapshots: raft.NewInmemSnapshotStore(), Transport: trans}
	cfg := DefaultConfig("a", "")
	cfg.Stores = full
	if err := cfg.Validate(); err != nil {
		t.Errorf("full Stores, no Dir: %v", err)
	}
	cfg.BindAddr = "127.0.0.1:0"
	if err := cfg.Validate(); !errors.Is(err, ErrInvalidConfig) {
		t.Errorf("Stores with a BindAddr: %v, want ErrInvalidConfig", err)
	}
	cfg = DefaultConfig("a", "")
	cfg.Stores = &Stores{Log: full.Log, Stable: full.Stable, Snapshots: full.Snapshots}
	if err := cfg.Validate(); !errors.Is(err, ErrInvalidConfig) {
		t.Errorf("Stores without a Transport: %v, want ErrInvalidConfig", err)
	}
	cfg.Stores = nil
	if err := cfg.Validate(); !errors.Is(err, ErrInvalidConfig) {
		t.Errorf("no Stores and no Dir: %v, want ErrInvalidConfig", err)
	}
}
