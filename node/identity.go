package node

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

// ErrClusterMismatch is returned by Open for a node asked to join another cluster than the
// one its data directory belongs to.
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

// removeUnfinishedIDWrites removes the temporary files of ID writes that did not finish (a
// crash between create and rename): they are never read, and only take space, so one that
// cannot be removed is logged and left.
func (n *Node) removeUnfinishedIDWrites() {
	for _, name := range []string{clusterIDFile, nodeIDFile} {
		if err := os.Remove(filepath.Join(n.cfg.DataDir, name+".tmp")); err != nil && !errors.Is(err, os.ErrNotExist) {
			n.log.Warn("could not remove an unfinished write of an ID file", "err", err)
		}
	}
}

// openClusterID reads the data directory's cluster ID; a node that bootstraps a new cluster
// (fresh, no Join) makes one.
func (n *Node) openClusterID(fresh bool) error {
	id, err := readClusterID(n.cfg.DataDir)
	if err != nil {
		return err
	}
	if id == "" && fresh && len(n.cfg.Join) == 0 {
		id = newClusterID()
	}
	if id == "" {
		return nil // learned from the Join reply, or from the metadata after catch-up
	}
	return n.adoptClusterID(id)
}

// ClusterID returns the ID of the cluster this node belongs to: the one in its data
// directory, else the one it is joining, else the replicated one, else "" (a fresh node
// that has not asked to join yet, data from before cluster IDs, or an embedded node).
func (n *Node) ClusterID() string {
	if id := n.clusterID.Load(); id != nil {
		return *id
	}
	if id := n.joining.Load(); id != nil {
		return *id
	}
	if n.fsm != nil {
		return n.fsm.ClusterID()
	}
	return ""
}

// recoverClusterID runs right after Raft opens, for a node with Raft state whose data
// directory has no cluster ID (its file was lost, or the data predates cluster IDs): it
// takes the ID from the restored snapshot or, failing that, from the first SetCluster in its
// log, and records it, before any Raft traffic is judged by it. With no ID anywhere the node
// is legacy: it accepts Raft traffic from any cluster until its leader records an ID.
func (n *Node) recoverClusterID() error {
	if n.clusterID.Load() != nil || !n.raft.HasState() {
		return nil
	}
	id := n.fsm.ClusterID()
	if id == "" {
		err := n.raft.LogCommands(func(data []byte) bool {
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
		n.legacy.Store(true)
		n.log.Warn("no cluster ID in this data directory, its snapshot or its log (data from before cluster IDs): accepting Raft traffic from any cluster until the leader records one")
		return nil
	}
	n.log.Info("cluster ID recovered from the Raft state", "cluster", id)
	return n.adoptClusterID(id)
}

// pinJoining records, before a fresh node sends Join, the ID of the cluster it asks:
// from then on its Raft listener takes only that cluster's traffic. A node that knows no
// cluster and is not joining one refuses every Raft connection (a leader of another
// cluster reaching it at an address it has for a stale member must not make it a member).
func (n *Node) pinJoining(id string) {
	if id != "" && n.clusterID.Load() == nil && n.joining.Load() == nil {
		n.joining.Store(&id)
	}
}

// clusterOpen is the Raft handshake's answer while this node knows no cluster ID.
func (n *Node) clusterOpen() bool { return n.legacy.Load() }

// watchClusterID, for a legacy node, records the cluster ID once the leader has recorded
// one in the metadata, so the node's Raft traffic is checked from then on.
func (n *Node) watchClusterID() {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for n.legacy.Load() {
		select {
		case <-n.closing:
			return
		case <-t.C:
		}
		if id := n.fsm.ClusterID(); id != "" {
			if err := n.adoptClusterID(id); err != nil {
				n.log.Error("cluster ID", "err", err)
				return
			}
			n.legacy.Store(false)
			n.log.Info("cluster ID recorded", "cluster", id)
		}
	}
}

// adoptClusterID records id as this node's cluster ID, in its data directory and in memory.
func (n *Node) adoptClusterID(id string) error {
	if id == "" {
		return nil
	}
	n.adoptMu.Lock() // the start-up checks, the leader's announce and watchClusterID may race
	defer n.adoptMu.Unlock()
	if cur := n.clusterID.Load(); cur != nil {
		if *cur != id {
			return fmt.Errorf("%w: this data directory belongs to cluster %s, not %s", ErrClusterMismatch, *cur, id)
		}
		return nil
	}
	if err := writeClusterID(n.cfg.DataDir, id); err != nil {
		return err
	}
	n.clusterID.Store(&id)
	return nil
}

// checkReplicatedClusterID, once the metadata has caught up, checks the replicated cluster
// ID against the data directory's, and records it there when the directory has none (a
// member from before cluster IDs, or one whose file was lost).
func (n *Node) checkReplicatedClusterID() error {
	rep := n.fsm.ClusterID()
	if rep == "" {
		return nil // the leader records one when it announces itself
	}
	if err := n.adoptClusterID(rep); err != nil {
		return fmt.Errorf("%w (the replicated metadata names cluster %s): refusing to start; see docs/operations.md", err, rep)
	}
	return nil
}

// recordClusterID, on the leader, records the cluster ID in the metadata if it has none: the
// bootstrap node's ID, or a new one for a cluster from before cluster IDs.
func (n *Node) recordClusterID(ctx context.Context) {
	if n.fsm.ClusterID() != "" {
		return
	}
	id := n.ClusterID()
	if id == "" {
		if !n.legacy.Load() {
			return // not the bootstrap node's data, not legacy: the ID is on its way (Join reply)
		}
		id = newClusterID() // a cluster from before cluster IDs gets one
	}
	res, err := n.raft.Propose(ctx, fsm.EncodeSetCluster(fsm.SetCluster{TxnID: kvoffload.NewTxnID(), ID: id}))
	if err != nil {
		n.log.Warn("could not record the cluster ID in the metadata", "err", err)
		return
	}
	if res.Aborted {
		id = n.fsm.ClusterID()
	}
	if err := n.adoptClusterID(id); err != nil {
		n.log.Error("cluster ID", "err", err)
		return
	}
	n.legacy.Store(false)
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

// ErrNodeIDMismatch is returned by Open for a node ID other than the one its data
// directory belongs to.
var ErrNodeIDMismatch = errors.New("node: node ID mismatch")

// checkNodeID refuses a data directory that belongs to another node ID, and records the ID
// of a directory without Raft state (fresh) that records none yet. It reports whether the
// directory records the ID now.
func (n *Node) checkNodeID(fresh bool) (recorded bool, err error) {
	dir, id := n.cfg.DataDir, n.cfg.ID
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

// recordNodeID records the node ID in a data directory made before nodeIDFile, once the
// node has opened under it.
func (n *Node) recordNodeID() error {
	return writeIDFile(n.cfg.DataDir, nodeIDFile, "node ID", n.cfg.ID)
}
