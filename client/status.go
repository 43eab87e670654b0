package client

import kvoffloadv1 "github.com/kvoffload/kvoffload/api/kvoffload/v1"

// ClusterStatus describes a cluster as one member sees it (Client.Status).
// Its JSON form is what `storenode status --json` prints.
type ClusterStatus struct {
	ClusterID string `json:"cluster_id"` // "kv-" and 24 hex digits (docs/operations.md, "Cluster identity")
	LeaderID  string `json:"leader_id"`  // empty while there is no leader
	// AppliedIndex is the Raft index the answering member has applied.
	AppliedIndex uint64 `json:"applied_index"`
	// Keys and Bytes are the live keys and payload bytes in the cluster metadata.
	Keys    uint64   `json:"keys"`
	Bytes   uint64   `json:"bytes"`
	Members []Member `json:"members"`
	// Refusing says why the answering member refuses offloads and reads (removed from the
	// cluster, a fail-stop); empty while it serves. Its view above may then be stale.
	Refusing string `json:"refusing,omitempty"`
	// Build is the answering member's binary: module version, VCS revision, Go version
	// (storenode version); empty from a member that predates it.
	Build string `json:"build,omitempty"`
	// FreeBytes is the free space, in bytes, of the answering member's data filesystem (-1:
	// unknown), and ReserveBytes the part of it bucket data never takes, kept for the WAL
	// and the Raft log (docs/operations.md, "The space reserve").
	FreeBytes    int64 `json:"free_bytes"`
	ReserveBytes int64 `json:"reserve_bytes"`
}

// Member is one node of the cluster's configuration.
type Member struct {
	NodeID   string `json:"node_id"`
	RaftAddr string `json:"raft_addr"`
	APIAddr  string `json:"api_addr"`
	PeerAddr string `json:"peer_addr"`
	Voter    bool   `json:"voter"`
	Leader   bool   `json:"leader"`
	// Keys and Bytes are the keys and payload bytes whose records the node holds.
	Keys  uint64 `json:"keys"`
	Bytes uint64 `json:"bytes"`
}

func clusterStatus(s *kvoffloadv1.StatusResponse) ClusterStatus {
	out := ClusterStatus{ClusterID: s.GetClusterId(), LeaderID: s.GetLeaderId(), AppliedIndex: s.GetAppliedIndex(),
		Keys: s.GetKeys(), Bytes: s.GetBytes(), Members: []Member{},
		Build: s.GetBuild(), FreeBytes: s.GetFreeBytes(), ReserveBytes: s.GetReserveBytes()}
	for _, m := range s.GetMembers() {
		out.Members = append(out.Members, Member{NodeID: m.GetNodeId(), RaftAddr: m.GetRaftAddr(), APIAddr: m.GetApiAddr(),
			PeerAddr: m.GetPeerAddr(), Voter: m.GetVoter(), Leader: m.GetLeader(), Keys: m.GetKeys(), Bytes: m.GetBytes()})
	}
	return out
}
