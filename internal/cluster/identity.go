package cluster

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/kvoffload/kvoffload"
	"github.com/kvoffload/kvoffload/fsm"
)

// Cluster identity (docs/operations.md, "Cluster identity"). A cluster's ID is made when its
// first node bootstraps, recorded in the replicated metadata (fsm.SetCluster) and in every
// member's data directory (clusterIDFile), and checked on everything between nodes: the
// cluster-ID handshake of every Raft connection (raftmeta/handshake.go), the clusterIDHeader
// of every peer call, and Join. etcd's cluster-ID mismatch check is the model: refuse, say
// why, change nothing.

// clusterIDFile holds the cluster ID in a member's data directory.
const clusterIDFile = "CLUSTER_ID"

// clusterIDHeader carries the caller's cluster ID on every peer call.
const clusterIDHeader = "kvoffload-cluster-id"

// ErrClusterMismatch is node.ErrClusterMismatch: Open's error for a node asked to join
// another cluster than the one its data directory belongs to.
var ErrClusterMismatch = errors.New("node: cluster ID mismatch")

// newClusterID returns a fresh random cluster ID.
func newClusterID() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return "kv-" + hex.EncodeToString(b[:])
}

// readClusterID returns the ID recorded in dir, "" if none.
func readClusterID(dir string) (string, error) { return readIDFile(dir, clusterIDFile, "cluster ID") }

// writeClusterID records id in dir durably (writeIDFile).
func writeClusterID(dir, id string) error { return writeIDFile(dir, clusterIDFile, "cluster ID", id) }

// readIDFile returns the ID recorded in dir's file name (what names it in errors), "" if
// there is none. A file name+".tmp" is never read: it is a write that did not finish.
func readIDFile(dir, name, what string) (string, error) {
	b, err := os.ReadFile(filepath.Join(dir, name))
	if errors.Is(err, os.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("node: reading the %s: %w", what, err)
	}
	id := strings.TrimSpace(string(b))
	if id == "" || len(id) > 255 {
		return "", fmt.Errorf("node: %s holds no valid %s (%d bytes)", filepath.Join(dir, name), what, len(id))
	}
	return id, nil
}

// writeIDFile records id in dir's file name durably: a temporary file, fsync, rename,
// directory fsync. A file that holds id already is left as it is: a start that changes
// nothing writes nothing (on a full disk, a restart must not fail for a file it has). A
// write that fails removes its temporary file.
func writeIDFile(dir, name, what, id string) error {
	if cur, err := readIDFile(dir, name, what); err == nil && cur == id {
		return nil
	}
	tmp := filepath.Join(dir, name+".tmp")
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o640)
	if err != nil {
		return fmt.Errorf("node: writing the %s: %w", what, err)
	}
	_, err = f.WriteString(id + "\n")
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, filepath.Join(dir, name))
	}
	if err == nil {
		var d *os.File
		if d, err = os.Open(dir); err == nil {
			err = d.Sync()
			d.Close()
		}
	}
	if err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("node: writing the %s: %w", what, err)
	}
	return nil
}

// RemoveUnfinishedIDWrites removes from data directory dir the temporary files of ID writes
// that did not finish (a crash between create and rename): they are never read, and only
// take space, so one that cannot be removed is logged and left.
func RemoveUnfinishedIDWrites(dir string, lg *slog.Logger) {
	for _, name := range []string{clusterIDFile, nodeIDFile} {
		if err := os.Remove(filepath.Join(dir, name+".tmp")); err != nil && !errors.Is(err, os.ErrNotExist) {
			lg.Warn("could not remove an unfinished write of an ID file", "err", err)
		}
	}
}

// OpenClusterID reads the data directory's cluster ID; a node that bootstraps a new cluster
// (fresh: no Raft state, and no Join) makes one. It runs before Raft opens.
func (m *Member) OpenClusterID(fresh bool) error {
	id, err := readClusterID(m.cfg.DataDir)
	if err != nil {
		return err
	}
	if id == "" && fresh && len(m.cfg.Join) == 0 {
		id = newClusterID()
	}
	if id == "" {
		return nil // learned from the Join reply, or from the metadata after catch-up
	}
	return m.adoptClusterID(id)
}

// ClusterID returns the ID of the cluster this node belongs to: the one in its data
// directory, else the one it is joining, else the replicated one, else "" (a fresh node
// that has not asked to join yet, data from before cluster IDs, or an embedded node).
func (m *Member) ClusterID() string {
	if id := m.clusterID.Load(); id != nil {
		return *id
	}
	if id := m.joining.Load(); id != nil {
		return *id
	}
	if m.fsm != nil {
		return m.fsm.ClusterID()
	}
	return ""
}

// recoverClusterID runs right after Raft opens, for a node with Raft state whose data
// directory has no cluster ID (its file was lost, or the data predates cluster IDs): it
// takes the ID from the restored snapshot or, failing that, from the first SetCluster in its
// log, and records it, before any Raft traffic is judged by it. With no ID anywhere the node
// is legacy: it accepts Raft traffic from any cluster until its leader records an ID.
func (m *Member) recoverClusterID() error {
	if m.clusterID.Load() != nil || !m.raft.HasState() {
		return nil
	}
	id := m.fsm.ClusterID()
	if id == "" {
		err := m.raft.LogCommands(func(data []byte) bool {
			if typ, cmd, err := fsm.Decode(data); err == nil && typ == fsm.CmdCluster {
				id = cmd.(fsm.SetCluster).ID
				return false
			}
			return true
		})
		if err != nil {
			return fmt.Errorf("node: looking for the cluster ID in the Raft log: %w", err)
		}
	}
	if id == "" {
		m.legacy.Store(true)
		m.log.Warn("no cluster ID in this data directory, its snapshot or its log (data from before cluster IDs): accepting Raft traffic from any cluster until the leader records one")
		return nil
	}
	m.log.Info("cluster ID recovered from the Raft state", "cluster", id)
	return m.adoptClusterID(id)
}

// pinJoining records, before a fresh node sends Join, the ID of the cluster it asks:
// from then on its Raft listener takes only that cluster's traffic. A node that knows no
// cluster and is not joining one refuses every Raft connection (a leader of another
// cluster reaching it at an address it has for a stale member must not make it a member).
func (m *Member) pinJoining(id string) {
	if id != "" && m.clusterID.Load() == nil && m.joining.Load() == nil {
		m.joining.Store(&id)
	}
}

// watchClusterID, for a legacy node, records the cluster ID once the leader has recorded
// one in the metadata, so the node's Raft traffic is checked from then on.
func (m *Member) watchClusterID() {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for m.legacy.Load() {
		select {
		case <-m.cfg.Closing:
			return
		case <-t.C:
		}
		if id := m.fsm.ClusterID(); id != "" {
			if err := m.adoptClusterID(id); err != nil {
				m.log.Error("cluster ID", "err", err)
				return
			}
			m.legacy.Store(false)
			m.log.Info("cluster ID recorded", "cluster", id)
		}
	}
}

// adoptClusterID records id as this node's cluster ID, in its data directory and in memory.
func (m *Member) adoptClusterID(id string) error {
	if id == "" {
		return nil
	}
	m.adoptMu.Lock() // the start-up checks, the leader's announce and watchClusterID may race
	defer m.adoptMu.Unlock()
	if cur := m.clusterID.Load(); cur != nil {
		if *cur != id {
			return fmt.Errorf("%w: this data directory belongs to cluster %s, not %s", ErrClusterMismatch, *cur, id)
		}
		return nil
	}
	if err := writeClusterID(m.cfg.DataDir, id); err != nil {
		return err
	}
	m.clusterID.Store(&id)
	return nil
}

// CheckReplicatedClusterID, once the metadata has caught up, checks the replicated cluster
// ID against the data directory's, and records it there when the directory has none (a
// member from before cluster IDs, or one whose file was lost).
func (m *Member) CheckReplicatedClusterID() error {
	rep := m.fsm.ClusterID()
	if rep == "" {
		return nil // the leader records one when it announces itself
	}
	if err := m.adoptClusterID(rep); err != nil {
		return fmt.Errorf("%w (the replicated metadata names cluster %s): refusing to start; see docs/operations.md", err, rep)
	}
	return nil
}

// recordClusterID, on the leader, records the cluster ID in the metadata if it has none: the
// bootstrap node's ID, or a new one for a cluster from before cluster IDs.
func (m *Member) recordClusterID(ctx context.Context) {
	if m.fsm.ClusterID() != "" {
		return
	}
	id := m.ClusterID()
	if id == "" {
		if !m.legacy.Load() {
			return // not the bootstrap node's data, not legacy: the ID is on its way (Join reply)
		}
		id = newClusterID() // a cluster from before cluster IDs gets one
	}
	res, err := m.raft.Propose(ctx, fsm.EncodeSetCluster(fsm.SetCluster{TxnID: kvoffload.NewTxnID(), ID: id}))
	if err != nil {
		m.log.Warn("could not record the cluster ID in the metadata", "err", err)
		return
	}
	if res.Aborted {
		id = m.fsm.ClusterID()
	}
	if err := m.adoptClusterID(id); err != nil {
		m.log.Error("cluster ID", "err", err)
		return
	}
	m.legacy.Store(false)
}

// clusterIDInterceptors stamp every outgoing peer call with this node's cluster ID.
func clusterIDInterceptors(id func() string) (grpc.UnaryClientInterceptor, grpc.StreamClientInterceptor) {
	stamp := func(ctx context.Context) context.Context {
		if v := id(); v != "" {
			return metadata.AppendToOutgoingContext(ctx, clusterIDHeader, v)
		}
		return ctx
	}
	unary := func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		return invoker(stamp(ctx), method, req, reply, cc, opts...)
	}
	stream := func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
		return streamer(stamp(ctx), desc, cc, method, opts...)
	}
	return unary, stream
}

// statusMethod is Cluster/Status: read-only, answered to any caller, so that a node of
// another cluster learns this cluster's ID and can say which two IDs differ.
const statusMethod = "/kvoffload.v1.Cluster/Status"

// clusterIDCheck returns server interceptors that refuse a peer call stamped with another
// cluster's ID (FailedPrecondition naming both, and a WARN here). Calls without a stamp (a
// fresh node's Join and Status) pass, and so does Status.
func clusterIDCheck(id func() string, lg *slog.Logger) (grpc.UnaryServerInterceptor, grpc.StreamServerInterceptor) {
	check := func(ctx context.Context, method string) error {
		md, _ := metadata.FromIncomingContext(ctx)
		theirs, mine := md.Get(clusterIDHeader), id()
		if len(theirs) == 0 || mine == "" || theirs[0] == mine || method == statusMethod {
			return nil
		}
		lg.Warn("peer call refused: another cluster's node", "method", method, "its_cluster", theirs[0], "cluster", mine)
		return status.Errorf(codes.FailedPrecondition, "cluster ID mismatch: the node called is in cluster %s, the caller in cluster %s", mine, theirs[0])
	}
	return guard(check)
}

// Node identity. A data directory belongs to one node ID for its life: the ID owns the keys
// whose bytes the directory holds, and its Raft state is that node's. The file nodeIDFile
// records it, written once: when a directory without Raft state is first opened, or, for a
// directory that has state but no file (made before the file existed), when its first open
// with the file's code succeeds (so a failed start under a wrong ID records nothing). Open
// refuses any other ID at once, naming both, before Raft or a listener starts.

// nodeIDFile holds the node ID in a data directory.
const nodeIDFile = "NODE_ID"

// ErrNodeIDMismatch is node.ErrNodeIDMismatch: Open's error for a node ID other than the one
// its data directory belongs to.
var ErrNodeIDMismatch = errors.New("node: node ID mismatch")

// CheckNodeID refuses data directory dir if it belongs to another node ID than id, and
// records id in a directory without Raft state (fresh) that records none yet. It reports
// whether the directory records the ID now.
func CheckNodeID(dir, id string, fresh bool) (recorded bool, err error) {
	cur, err := readIDFile(dir, nodeIDFile, "node ID")
	if err != nil {
		return false, err
	}
	switch {
	case cur == id:
		return true, nil
	case cur != "":
		return false, fmt.Errorf("%w: data directory %s belongs to node %s, not --id %s: restart it with --id %s, or give node %s an empty --data of its own", ErrNodeIDMismatch, dir, cur, id, cur, id)
	case fresh:
		return true, writeIDFile(dir, nodeIDFile, "node ID", id)
	}
	return false, nil
}

// RecordNodeID records node ID id in data directory dir, made before nodeIDFile, once the
// node has opened under it.
func RecordNodeID(dir, id string) error { return writeIDFile(dir, nodeIDFile, "node ID", id) }
